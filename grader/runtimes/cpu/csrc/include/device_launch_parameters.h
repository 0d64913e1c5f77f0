// Stand-in for NVIDIA's device_launch_parameters.h: the CPU emulator's cuda_emu.h (always included) has what it offers.
#pragma once
