# One FLUX kernel's cost from its compile: awk -f usage.awk PTXAS_LOG RESOURCES SASS prints
#   registers stack_bytes spill_store_bytes spill_load_bytes static_shared_bytes param_bank_bytes sass_instructions clock_reads globaltimer_reads
# for the one kernel whose name holds "flux_" (FLUX's generated op struct is a template argument of
# the kernel). PTXAS_LOG: nvcc -Xptxas -v output (the spills; the entry's properties follow its
# "Compiling entry function" line); RESOURCES: cuobjdump -res-usage (registers, stack, static shared
# memory, constant bank 0 = the launch parameters); SASS: cuobjdump -sass. Exits 1 unless exactly one
# such kernel is in each.
FNR == 1 { part++ }
part == 1 {
  if (index($0, "Compiling entry function '")) {
    entry = $0; sub(/.*Compiling entry function '/, "", entry); sub(/'.*/, "", entry)
    if (entry !~ /flux_/) entry = ""
  } else if (index($0, "Function properties for ")) {
    name = $0; sub(/.*Function properties for /, "", name); mine = (entry != "" && name == entry)
  } else if (mine && $0 ~ /bytes stack frame/) {
    spill_st = $5; spill_ld = $9; found_log++; mine = 0
  }
  next
}
part == 2 {
  if ($1 == "Function") { mine = ($2 ~ /flux_/); next }
  if (mine && $1 ~ /^REG:/) {
    for (i = 1; i <= NF; i++) {
      split($i, kv, ":")
      if (kv[1] == "REG") regs = kv[2]
      if (kv[1] == "STACK") stack = kv[2]
      if (kv[1] == "SHARED") smem = kv[2]
      if (kv[1] == "CONSTANT[0]") params = kv[2]
    }
    found_res++; mine = 0
  }
  next
}
/Function : / { in_kernel = ($3 ~ /flux_/); if (in_kernel) found_sass++ }
in_kernel && /^ +\/\*[0-9a-f][0-9a-f][0-9a-f][0-9a-f]+\*\// {
  instr++
  if (index($0, "SR_CLOCKLO")) clock++
  if (index($0, "SR_GLOBALTIMERLO")) gtimer++
}
END {
  if (found_log != 1 || found_res != 1 || found_sass != 1) exit 1
  print regs, stack, spill_st, spill_ld, smem, params + 0, instr + 0, clock + 0, gtimer + 0
}
