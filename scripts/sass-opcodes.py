#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""SASS opcode counts of the sm_90 kernels in a kernel cache, without cuobjdump (the CPU
machines have none):
    scripts/sass-opcodes.py CACHE_DIR [PATTERN]
prints, for every cached kernel whose name contains PATTERN, how many of its instructions
are each opcode below, and the longest run of FFMAs (a W8A8 fold is one of 64).

An sm_90 instruction is 16 bytes; bits 0-11 of its low word select it. The values are
those whose counts matched `cuobjdump -sass` on the same kernels on the device (docs/PERF.md,
twenty-seventh session): R2UR, HGMMA and QGMMA in W4A16 and fp8 kernels built from two
commits; FFMA from the fp8 folds' 4 x 64 runs. Anything else is not known to this script."""
import glob
import os
import struct
import sys

OPCODES = {"R2UR": 0x2CA, "HGMMA": 0xDF0, "QGMMA": 0x9F3, "FFMA": 0x223}


def code_sections(image):
    """The bytes of every .text.* section of an ELF64 image."""
    shoff, = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]
    for h in headers:
        name = image[names + h[0]:image.index(b"\0", names + h[0])]
        if name.startswith(b".text."):
            yield image[h[4]:h[4] + h[5]]


def opcodes(image):
    for text in code_sections(image):
        for at in range(0, len(text), 16):
            yield struct.unpack_from("<Q", text, at)[0] & 0xFFF


def longest_run(ops, opcode):
    best = run = 0
    for op in ops:
        run = run + 1 if op == opcode else 0
        best = max(best, run)
    return best


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    pattern = sys.argv[2] if len(sys.argv) == 3 else ""
    for entry in sorted(glob.glob(os.path.join(sys.argv[1], "kernels", "*", "*"))):
        cubin = os.path.join(entry, "kernel.cubin")
        if not os.path.exists(cubin):
            continue
        with open(os.path.join(entry, "options.txt")) as f:
            name = next((w for w in f.read().split() if w.startswith("hm_") and w.endswith(".cu")), entry)
        if pattern not in name:
            continue
        with open(cubin, "rb") as f:
            ops = list(opcodes(f.read()))
        counts = " ".join("%s %d" % (k, sum(op == v for op in ops)) for k, v in OPCODES.items())
        print("%s: %d instructions, %s, longest FFMA run %d" % (name, len(ops), counts,
                                                               longest_run(ops, OPCODES["FFMA"])))


if __name__ == "__main__":
    main()
