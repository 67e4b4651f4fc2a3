#!/bin/bash
# bench/gpu/pack.sh — gathers what bench/gpu/run.sh needs on a GPU host that lacks conveyor's
# build dependencies: the binaries of a build here (x86-64, Debian 12's glibc is older than a
# GPU host's), the shared libraries they use that such a host may lack, and Go's test JPEGs.
#     bench/gpu/pack.sh build/default .gpu
#     TSAN_BUILD=build/tsan bench/gpu/pack.sh build/default .gpu     (also the CUDA tests under TSan)
set -eu
BUILD=${1:-build/default}
PACK=${2:-.gpu}
rm -rf "$PACK"
mkdir -p "$PACK/bin" "$PACK/lib" "$PACK/go-testdata"
cp "$BUILD/bench/conveyor-bench" "$BUILD/tests/cuda/conveyor-cuda-tests" "$BUILD/examples/quickstart" "$PACK/bin/"
strip "$PACK"/bin/* 2>/dev/null || true
for lib in libboost_json.so.1.81.0 libboost_url.so.1.81.0 libssl.so.3 libcrypto.so.3 libz.so.1 liburing.so.2 \
           libturbojpeg.so.0 libjpeg.so.62 libspng.so.0; do
  cp -L "/lib/x86_64-linux-gnu/$lib" "$PACK/lib/"
done
cp -L /usr/local/cuda/lib/libcudart.so.13 "$PACK/lib/" 2>/dev/null || true
# WebP and AVIF, where the build has them: libwebp, libavif and what libavif links (its AV1
# codecs, libyuv, absl).
for lib in $(ldd "$BUILD/bench/conveyor-bench" | awk '$3 ~ /^\// {print $3}'); do
  case "$(basename "$lib")" in
    libwebp*|libsharpyuv*|libavif*|libdav1d*|libaom*|librav1e*|libSvtAv1*|libgav1*|libyuv*|libabsl*) cp -nL "$lib" "$PACK/lib/" ;;
  esac
done
# With TSAN_BUILD=build/tsan: the CUDA tests built under ThreadSanitizer, and its runtime.
if [ -n "${TSAN_BUILD:-}" ]; then
  cp "$TSAN_BUILD/tests/cuda/conveyor-cuda-tests" "$PACK/bin/conveyor-cuda-tests-tsan"
  strip --strip-debug "$PACK/bin/conveyor-cuda-tests-tsan"
  # Its libraries (a debug build links more of Boost), less the C and C++ runtimes a GPU host has.
  for lib in $(ldd "$PACK/bin/conveyor-cuda-tests-tsan" | awk '$3 ~ /^\// {print $3}'); do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|ld-linux*|libstdc++*|libgcc_s*|libpthread*|libdl.so*|librt.so*|libcuda.so*) ;;
      *) cp -nL "$lib" "$PACK/lib/" ;;
    esac
  done
fi
cp /usr/share/go-1.19/src/image/testdata/*.jpeg /usr/share/go-1.19/src/image/testdata/video-001.png "$PACK/go-testdata/" 2>/dev/null || true
du -sh "$PACK"
