// Stand-in for NVIDIA's mma.h: the WMMA API (nvcuda::wmma) is in the emulator's emu/wmma.h, which
// only a kernel that includes <mma.h> sees, as with CUDA.
#pragma once
#include "../emu/wmma.h"
