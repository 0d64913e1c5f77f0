// Stand-in for NVIDIA's cooperative_groups.h: the CPU emulator's cuda_emu.h (always included) has what it offers.
#pragma once
