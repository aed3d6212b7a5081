# Sourced by the device session scripts: lcpp_build JOBS TARGET... builds llama.cpp's source from
# .peers (../shared/tools/llamacpp-on-device) with CUDA for sm_90 into /tmp/lcpp/llama.cpp/build
# (logs in /tmp/lcpp) and prints its exit status.
lcpp_build() {
  local jobs=$1; shift
  (mkdir -p /tmp/lcpp && tar xzf .peers/*.tgz -C /tmp/lcpp && cd /tmp/lcpp/llama.cpp &&
   cmake -B build -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF \
     -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF \
     -DCMAKE_BUILD_TYPE=Release > /tmp/lcpp/cmake.log 2>&1 &&
   cmake --build build -j "$jobs" --target "$@" > /tmp/lcpp/build.log 2>&1
   echo "llama.cpp build rc $?")
}
