#!/bin/sh
# Compiler launcher of the header tests' self-containment TUs: runs the compile command it is
# given with -fsyntax-only (the header is parsed and every template it uses instantiated, no
# code is generated) and, when that passes, leaves an empty file as the command's object
# (`-o`), so that the build sees the step done. Dependencies (-MD) are written as usual.
out=
prev=
for a in "$@"; do
  [ "$prev" = "-o" ] && out=$a
  prev=$a
done
"$@" -fsyntax-only || exit
[ -z "$out" ] || : >"$out"
