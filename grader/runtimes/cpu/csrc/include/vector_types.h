// Stand-in for NVIDIA's vector_types.h: the CPU emulator's cuda_emu.h (always included) has what it offers.
#pragma once
