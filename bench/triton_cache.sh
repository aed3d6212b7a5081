#!/usr/bin/env bash
# Triton's compile cache carried from one device session to the next: a session spends minutes
# of its device time compiling the same kernels (the doctor's packed-matmul check alone, 94 s on
# 2026-12-07). The cache's entries are keyed by the kernel's source, the Triton build and the
# target (sm_90 for an H100 and an H200 alike): an entry whose kernel changed since is never
# used, it is compiled again.
#   bash bench/triton_cache.sh save   # the LAST call of a session, alone (at most 8 files come
#                                     # back): $HOME/.triton/cache, without its IR text (only the
#                                     # binaries, their metadata and the launchers are read
#                                     # back), as $OUT/tcache.tgz.partaa.. (15 MB pieces)
#   bash bench/triton_cache.sh load   # the first call of the next session, carrying .tcache
#                                     # (the pieces, copied here from the files that came back):
#                                     # unpacked at the same absolute place ($HOME/.triton/cache)
# Here: mkdir -p .tcache && cp /work/.device/N/tcache.tgz.part* .tcache/ (.tcache is ignored:
# echo /.tcache/ >> .git/info/exclude).
set -eu
dir=.triton/cache
case "${1:-}" in
save)
  [ -d "$HOME/$dir" ] || { echo "no Triton cache at $HOME/$dir"; exit 1; }
  echo "Triton cache: $(find "$HOME/$dir" -name '*.json' ! -name '__grp__*' | wc -l) entries, $(du -sh "$HOME/$dir" | cut -f1)"
  tar czf - --exclude='*.ptx' --exclude='*.ttir' --exclude='*.ttgir' --exclude='*.llir' \
    --exclude='*.source' --exclude='*.amdgcn' -C "$HOME" "$dir" | split -b 15m - "$OUT/tcache.tgz.part"
  ls -la "$OUT"/tcache.tgz.part* ;;
load)
  ls .tcache/tcache.tgz.part* > /dev/null 2>&1 || { echo "no .tcache/tcache.tgz.part* carried"; exit 1; }
  mkdir -p "$HOME"
  cat .tcache/tcache.tgz.part* | tar xzf - -C "$HOME"
  echo "Triton cache: $(find "$HOME/$dir" -name '*.json' ! -name '__grp__*' | wc -l) entries loaded" ;;
*)
  echo "usage: bash bench/triton_cache.sh save|load"; exit 2 ;;
esac
