# Read by the llama.cpp that llama-cpp-python vendors, right after its project() call, when .ci/run
# builds the real model server (CMAKE_ARGS: -DCMAKE_PROJECT_llama.cpp_INCLUDE=THIS_FILE).
# llama-cpp-python forces LLAMA_BUILD_COMMON on (a cache entry), yet its Python package loads only
# libllama and libggml* (and libmtmd, not built here): a normal variable wins over llama.cpp's
# option() of that name (policy CMP0077), so llama-common, its chat parsers and cpp-httplib, 53 of
# the 127 files to compile, are neither built nor installed.
set(LLAMA_BUILD_COMMON OFF)
