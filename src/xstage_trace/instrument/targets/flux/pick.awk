# Cut one translation unit that FLUX's generator (src/generator/gen_*.cc) wrote, one gemm meta per
# file with one block per hparams, down to one configuration: the header (the meta), the hparams
# block whose struct is `_HP` (awk -v hp=HP), and that block's registration in the static
# initializer (which instantiates the device op and so the kernel): the file the generator would
# write for a space of that one configuration. Prints nothing if HP is absent.
/^using _GemmHParamsT_[0-9]+ = / { body = 1; blk = "" }
/^static bool _dummy_reg/ { body = 0; tail = 1 }
!body && !tail { head = head $0 "\n"; next }
body {
  blk = blk $0 "\n"
  if (index($0, "struct _" hp " : ") == 1) hit = 1
  if ($0 ~ /^using GemmDevice_[0-9]+ = /) {
    if (hit) { mine = blk; reg = $0; sub(/^using GemmDevice_/, "", reg); sub(/ =.*/, "", reg) }
    hit = 0; blk = ""
  }
  next
}
tail { lines[++n] = $0 }
END {
  if (mine == "") exit
  printf "%s%s\n", head, mine
  for (i = 1; i <= n; i++)
    if (lines[i] ~ /^static bool _dummy_reg|^true\);/ || index(lines[i], "GemmHParamsT_" reg "{}," reg "),")) print lines[i]
}
