# One FLUX kernel's cost from its compile: awk -f flux_usage.awk PTXAS_LOG SASS prints
#   registers stack_bytes spill_store_bytes spill_load_bytes static_shared_bytes sass_instructions clock_reads globaltimer_reads
# for the one kernel whose name holds "flux_" (FLUX's generated op struct is a template argument of
# the kernel). PTXAS_LOG: nvcc -Xptxas -v output, where the entry's properties follow its
# "Compiling entry function" line; SASS: cuobjdump -sass of the cubin. Exits 1 unless exactly one
# such function is in each.
FNR == NR {
  if (index($0, "Compiling entry function '")) {
    entry = $0; sub(/.*Compiling entry function '/, "", entry); sub(/'.*/, "", entry)
    if (entry !~ /flux_/) entry = ""
  } else if (index($0, "Function properties for ")) {
    name = $0; sub(/.*Function properties for /, "", name); mine = (entry != "" && name == entry)
  }
  else if (mine && $0 ~ /bytes stack frame/) { stack = $1; spill_st = $5; spill_ld = $9 }
  else if (mine && $0 ~ /Used [0-9]+ registers/) {
    smem = 0
    for (i = 2; i <= NF; i++) {
      if ($i == "registers," || $i == "registers") regs = $(i - 1)
      if (($i == "smem," || $i == "smem") && $(i - 1) == "bytes") smem = $(i - 2)
    }
    found_log++; mine = 0
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
  if (found_log != 1 || found_sass != 1) exit 1
  print regs, stack, spill_st, spill_ld, smem, instr + 0, clock + 0, gtimer + 0
}
