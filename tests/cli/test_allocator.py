"""The commands' allocator setting (dstg_interp/cli/allocator.py): freed batches' pages are reused, not faulted in again."""

import json
import os
import platform
import subprocess
import sys

import pytest

# In a fresh process: optionally keep freed memory, then allocate a 256 MiB array, free it and allocate it
# again; glibc's own account (mallinfo2) says where the block lived: mapped for itself (hblkhd) or in the heap
# (arena), and whether the heap still held it after the free (fordblks, its free bytes).
CHILD = """
import ctypes, json, sys
import numpy as np
from dstg_interp.cli.allocator import keep_freed_memory
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
applied = keep_freed_memory() if sys.argv[1] == "keep" else None
block = np.ones(32 * 2**20)  # 256 MiB of float64, above glibc's largest default mmap threshold (32 MiB)
held = libc.mallinfo2()
del block
freed = libc.mallinfo2()
print(json.dumps({"applied": applied, "mapped_while_held": held.hblkhd, "heap_free_after": freed.fordblks}))
"""
BLOCK = 256 * 2**20
GLIBC = platform.libc_ver()[0] == "glibc"


def child(mode: str, **env) -> dict:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "DSTG_MALLOC"}
    result = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True,
                            env=dict(environment, **env))
    return json.loads(result.stdout)


def test_freed_blocks_stay_in_the_heap_for_the_next_batch():
    kept, system = child("keep"), child("system")
    assert kept["applied"] is GLIBC
    if GLIBC:  # the block came from the heap, and the heap keeps its pages for the next one
        assert kept["mapped_while_held"] < BLOCK <= kept["heap_free_after"], kept
    # glibc's default maps a block this size for itself and unmaps it on free: the next one faults in afresh
    assert system["mapped_while_held"] >= BLOCK > system["heap_free_after"], system


@pytest.mark.parametrize("env", [{"DSTG_MALLOC": "system"}, {"MALLOC_MMAP_THRESHOLD_": "131072"},
                                 {"MALLOC_TRIM_THRESHOLD_": "131072"}])
def test_the_users_own_setting_is_left_alone(env):
    assert child("keep", **env)["applied"] is False


def test_the_commands_set_it_before_their_module_loads(monkeypatch):
    from dstg_interp.cli import entry

    calls = []
    monkeypatch.setattr(entry, "keep_freed_memory", lambda: calls.append("allocator"))
    monkeypatch.setattr(entry.importlib, "import_module", lambda name: calls.append("import") or
                        type("Module", (), {"main": staticmethod(lambda argv: 0)}))
    assert entry.launch("dstg-probe", []) == 0
    assert calls == ["allocator", "import"]
