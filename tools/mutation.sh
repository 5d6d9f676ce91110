#!/usr/bin/env bash
# Mutation testing of the modules that produce the answers (docs/mutation.md). Not part of CI.
#
#   tools/mutation.sh [GROUP ...]   groups: model calibration tiles forward drain partition kernels pairing align probe_format gate (default: all)
#
# Each group mutates its modules in a scratch copy of the working tree (the checkout is never
# touched) and runs, per mutant, only the fast tests listed for the group (mutmut further narrows
# them to the tests that call the mutated function). Needs mutmut 3 (pip install mutmut==3.8.1);
# MUTMUT_PYTHON picks the interpreter (default: python3), MUTMUT_JOBS the workers (default: nproc),
# MUTMUT_PYTHONPATH is appended to the path (where mutmut is installed with pip --target).
# Results: mutation-results/GROUP.txt (one line per mutant: name: status) and a summary on stdout.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${MUTMUT_PYTHON:-python3}
jobs=${MUTMUT_JOBS:-$(nproc)}
out=${MUTMUT_OUT:-$here/mutation-results}
mkdir -p "$out"

A=src/xstage_trace/analysis
C=src/xstage_trace/collectors
# group: modules to mutate | the fast tests that cover them (tests/test_mutation_*.py: tests written against mutants)
declare -A MUTATE TESTS SCOPE   # SCOPE: regex over mutant names that the rate counts (default: all)
add() { MUTATE[$1]=$2; TESTS[$1]=$3; ORDER+=("$1"); }
ids() { local f=$1; shift; for t in "$@"; do printf '%s::%s ' "$f" "$t"; done; }   # file::test ids
# test_link_whatif.py less its test that analyses the DeepGEMM sample (seconds per mutant)
link_whatif_fast() { ids tests/test_link_whatif.py $(sed -n 's/^def \(test_[a-z0-9_]*\).*/\1/p' "$here/tests/test_link_whatif.py" | grep -v deepgemm); }
ORDER=()
TILE_ERROR_HAND="test_slot_cycle_terms_by_hand test_identity_idle_equals_span_minus_cover_plus_lead_minus_inner_plus_wake
  test_idle_floor_from_the_control_and_the_errors test_grouping_keys_and_concurrent_stores test_breakdown_by_kind_known_answer
  test_tail_share_known_answer test_summary_scores_only_stall_bound_configurations"
PIGGYBACK_HAND="test_kv_blocks_match_hand_counts test_decode_tile_id_inverts_the_recipe_packing test_dumps_without_fa3_geometry_are_left_out
  test_audit_reproduces_the_papers_fa4_numbers"
PARTITION_HAND="test_constant_service_times_reduce_to_section9_with_rho_tau_over_wave test_c_dependent_service_times_by_hand
  test_fit_service_times_averages_each_c_and_needs_every_c test_regret_table_by_hand test_fixed_c_speedup_by_hand"
add model        "$A/burst_gap.py $A/recurrence.py $A/stall_law.py $A/whatif.py $A/partition.py $A/timing.py" \
                 "tests/test_model.py tests/test_burst_gaps.py tests/test_mutation_model.py"
add calibration  "$A/calibration_fit.py $A/calibration_capacity.py $A/calibration_crossrun.py $A/calibration_points.py $A/calibration_model.py" \
                 "tests/test_mutation_calibration.py tests/test_mutation_calibration_capacity.py tests/test_mutation_calibration_crossrun.py
                  tests/test_mutation_calibration_points.py tests/test_mutation_calibration_model.py"
add tiles        "$A/tiles.py $A/stall.py $A/verdict.py $A/bursts.py $A/link_whatif.py" \
                 "tests/test_mutation_tiles.py tests/test_mutation_tiles_spans.py tests/test_mutation_stall.py tests/test_verdict.py
                  tests/test_burst_gaps.py tests/test_diagnosis.py $(link_whatif_fast)
                  tests/test_tiles.py::test_control_p99_and_median_equal_pandas_group_by_with_missing_keys_and_values
                  tests/test_forward_pipeline.py::test_plain_stores_of_one_round_complete_when_the_round_has_drained_by_hand
                  tests/test_compare.py::test_trials_drop_the_warmups_and_keep_the_slowest_rank_per_trial"
add forward      "$A/forward.py $A/tile_error.py $A/piggyback.py" \
                 "tests/test_mutation_forward.py tests/test_forward.py $(link_whatif_fast) tests/test_mutation_tiles.py
                  tests/test_forward_pipeline.py::test_plain_stores_of_one_round_complete_when_the_round_has_drained_by_hand
                  tests/test_mutation_tile_error.py $(ids tests/test_tile_error.py $TILE_ERROR_HAND)
                  tests/test_mutation_piggyback.py $(ids tests/test_fa3_piggyback.py $PIGGYBACK_HAND)"
add drain        "$A/drain_fit.py $A/drain_points.py" "tests/test_mutation_drain.py tests/test_forward.py"
add partition    "$A/partition_select.py $A/partition_regret.py" \
                 "tests/test_mutation_partition.py $(ids tests/test_partition_select.py $PARTITION_HAND)"
add kernels      "$A/selection.py $A/columnar.py $A/spans.py $A/platform.py" \
                 "tests/test_selection.py tests/test_columnar.py tests/test_mutation_kernels.py"
add pairing      "$C/pairing.py"      "tests/test_mutation_pairing.py tests/test_trust.py::test_a_clock_two_seconds_off_is_refused"
add align        "$C/align.py"        "tests/test_collect_align.py tests/test_mutation_align.py"
add probe_format "$C/probe_format.py" "tests/test_probe_format.py tests/test_mutation_probe_format.py"
add gate         "src/xstage_trace/reports/compare.py" \
                 "tests/test_mutation_gate.py tests/test_mutation_gate_tiles.py tests/test_compare.py::test_kernel_verdict_rule_on_hand_made_samples
                  tests/test_compare.py::test_bootstrap_interval_brackets_a_known_shift"
SCOPE[gate]="x_(kernel_verdict|metric_verdict|rel_iqr_pct|bootstrap_change_pct|gate_outcome)__"   # the rule; the rest: plumbing, markdown

groups=("$@"); [ ${#groups[@]} -eq 0 ] && groups=("${ORDER[@]}")
for g in "${groups[@]}"; do
  [ -n "${MUTATE[$g]:-}" ] || { echo "unknown group $g (${ORDER[*]})" >&2; exit 2; }
  work=$(mktemp -d "${TMPDIR:-/tmp}/xstage-mut-$g.XXXXXX")
  # the checkout's files (outside a git checkout: every file but mutation results)
  (cd "$here" && { git ls-files -co --exclude-standard -z 2>/dev/null ||
     find . -path ./.git -prune -o -path ./mutation-results -prune -o -type f -print0; } | xargs -0 cp --parents -t "$work" 2>/dev/null || true)
  pats=${MUTMUT_ONLY:-${MUTATE[$g]}}   # MUTMUT_ONLY: a narrower glob (one module) for a quick run
  tests=""   # test files (or file::test ids) that exist in this checkout
  # MUTMUT_TESTS: other tests for a quick run
  for t in ${MUTMUT_TESTS:-${TESTS[$g]}}; do [ -e "$work/${t%%::*}" ] && tests="$tests $t"; done
  {
    echo "[mutmut]"
    echo "source_paths = src"
    echo "only_mutate ="; for p in $pats; do echo "    $p"; done
    echo "also_copy ="; for p in sample_traces benchmarks docs; do echo "    $p"; done
    echo "pytest_add_cli_args_test_selection ="; for t in $tests; do echo "    $t"; done
    echo "pytest_add_cli_args ="; for a in -q -p no:cacheprovider -m "not gpu"; do echo "    $a"; done
  } > "$work/setup.cfg"
  rm -f "$work/pyproject.toml.orig"
  echo "== $g: $(cd "$work" && ls $pats | wc -l) modules, tests: $tests"
  # subprocesses the tests start (the CLI) import the mutated copy too, and mutmut's trampoline
  # (an editable install of another checkout must not win: sitecustomize drops its path entry)
  mkdir -p "$work/.mutpath" "$work/mutants/src"   # before python starts: a missing path entry is cached as empty
  cat > "$work/.mutpath/sitecustomize.py" <<PY
import os, sys
sys.path[:] = [p for p in sys.path if p == "$work/mutants/src" or not os.path.isdir(os.path.join(p, "xstage_trace"))]
sys.path.insert(0, "$work/mutants/src")
# a CLI subprocess of a test must not record mutmut's call statistics (they belong to the test process)
if os.environ.get("MUTANT_UNDER_TEST") == "stats":
    os.environ["MUTANT_UNDER_TEST"] = ""
PY
  export PYTHONPATH="$work/.mutpath:$work/mutants/src${MUTMUT_PYTHONPATH:+:$MUTMUT_PYTHONPATH}"
  (cd "$work" && "$py" -m mutmut run --max-children "$jobs" > "$out/$g.log" 2>&1 || true)
  (cd "$work" && "$py" -m mutmut results --all true > "$out/$g.txt" 2>&1 || true)
  "$py" "$here/tools/mutation_summary.py" "$out/$g.txt" "$g" "${SCOPE[$g]:-.}"
  echo "   scratch copy: $work (mutmut browse there; rm -rf it when done)"
done
