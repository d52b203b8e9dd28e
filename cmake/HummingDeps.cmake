# SPDX-License-Identifier: Apache-2.0
# Finds every dependency; a missing one stops configure naming the Debian package.
# All of it is collected in the interface target hm::deps.

find_package(PkgConfig QUIET)
if(NOT PKG_CONFIG_FOUND)
  message(FATAL_ERROR "pkg-config not found: apt-get install pkg-config")
endif()

function(hm_require_pkg var module package)
  pkg_check_modules(${var} QUIET IMPORTED_TARGET ${module})
  if(NOT ${var}_FOUND)
    message(FATAL_ERROR "${module} not found: apt-get install ${package}")
  endif()
endfunction()

if(NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT} AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND OR NOT TARGET CUDA::nvrtc)
  message(FATAL_ERROR "CUDA toolkit with NVRTC not found (looked in ${CUDAToolkit_ROOT}): "
          "apt-get install nvidia-cuda-toolkit, or NVIDIA's cuda-toolkit-13-0, or set CUDAToolkit_ROOT")
endif()

# NVRTC by its library file: CMake's CUDA::nvrtc target also links the toolkit's placeholder
# libcuda.so, which would make every binary need libcuda.so.1 wherever the linker does
# not drop unused libraries (sanitizer builds do not); the driver is dlopened instead.
find_library(HM_NVRTC_LIBRARY nvrtc HINTS ${CUDAToolkit_LIBRARY_DIR} NO_DEFAULT_PATH)
if(NOT HM_NVRTC_LIBRARY)
  message(FATAL_ERROR "libnvrtc not found in ${CUDAToolkit_LIBRARY_DIR}: install the CUDA toolkit's NVRTC")
endif()

find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
if(NOT NCCL_INCLUDE_DIR)
  message(FATAL_ERROR "nccl.h not found: apt-get install libnccl-dev")
endif()

find_package(MPI QUIET COMPONENTS C)
if(NOT MPI_C_FOUND)
  message(FATAL_ERROR "MPI not found: apt-get install libopenmpi-dev openmpi-bin")
endif()

find_package(OpenSSL QUIET COMPONENTS Crypto)
if(NOT OpenSSL_FOUND)
  message(FATAL_ERROR "OpenSSL libcrypto not found: apt-get install libssl-dev")
endif()

find_package(Threads REQUIRED)
hm_require_pkg(HWLOC hwloc libhwloc-dev)
hm_require_pkg(JANSSON jansson libjansson-dev)
hm_require_pkg(CMOCKA cmocka libcmocka-dev)

add_library(hm_deps INTERFACE)
add_library(hm::deps ALIAS hm_deps)
# The driver (libcuda) and NCCL are opened with dlopen; only their headers are used here.
target_include_directories(hm_deps INTERFACE ${CUDAToolkit_INCLUDE_DIRS} ${NCCL_INCLUDE_DIR})
target_link_libraries(hm_deps INTERFACE ${HM_NVRTC_LIBRARY} MPI::MPI_C OpenSSL::Crypto PkgConfig::HWLOC
                      PkgConfig::JANSSON Threads::Threads ${CMAKE_DL_LIBS} m)
set(HM_CUDA_HOME ${CUDAToolkit_LIBRARY_ROOT})
