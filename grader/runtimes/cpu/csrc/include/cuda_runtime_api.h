// Stand-in for NVIDIA's cuda_runtime_api.h: the CPU emulator's cuda_emu.h (always included) has what it offers.
#pragma once
