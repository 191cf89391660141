#!/bin/sh
# Builds and runs the dataset-format fuzz harnesses (tfrecord_fuzz, jpeg_fuzz) under
# ASan + UBSan with libFuzzer. Usage, from the repo root:
#   fuzz/run_formats_fuzz.sh [seconds per harness, default 60] [harness ...]
# Needs clang-14 and libclang-rt-14-dev (Debian), libjpeg62-turbo-dev. New inputs go to
# a scratch corpus under ${FUZZ_WORK:-/tmp/podlet_fuzz}; crashes are written there as
# crash-*. Exit status is non-zero when a harness finds a crash.
set -eu
secs=${1:-60}
[ $# -gt 0 ] && shift
harnesses=${*:-"tfrecord jpeg"}
work=${FUZZ_WORK:-/tmp/podlet_fuzz}
cxx=${CXX_FUZZ:-clang++-14}
flags="-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Icpp"
mkdir -p "$work"
for h in $harnesses; do
  case $h in
    tfrecord) srcs="cpp/podlet/io/crc32c.cc cpp/podlet/io/tfrecord.cc cpp/podlet/io/example_proto.cc cpp/podlet/io/jpeg.cc cpp/podlet/io/tfrecord_source.cc" ;;
    jpeg) srcs="cpp/podlet/io/jpeg.cc" ;;
    *) echo "unknown harness $h (tfrecord, jpeg)" >&2; exit 2 ;;
  esac
  $cxx $flags "fuzz/${h}_fuzz.cc" $srcs -ljpeg -o "$work/${h}_fuzz"
  mkdir -p "$work/${h}_corpus"
  (cd "$work" && "./${h}_fuzz" -max_total_time="$secs" -rss_limit_mb=1024 -print_final_stats=1 \
      "${h}_corpus" "$OLDPWD/fuzz/corpus/$h")
done
