"""Stores that prove their own bytes: a checksum of every array and label file, kept in the manifest.

    from dstg_interp.store.checksums import file_checksums, checksum_damage
    manifest["checksums"] = {"algorithm": ALGORITHM, "files": {name: file_checksums(folder / name), ...}}
    checksum_damage(folder, manifest)               # None, or "PATH: ..." naming the first damaged file
    checksum_damage(folder, manifest, full=True)    # every byte (dstg-verify)

Two digests per file, both xxh3-128 (a checksum against bit rot, a bad copy or an edit from outside, not a
defence against an adversary): ``full`` over every byte, and ``sample`` over the file's size and
SAMPLE_BLOCKS blocks of SAMPLE_BYTES spread evenly from its first byte to its last (the whole file when it
is smaller).  Writing a store computes both in one read of each file, two files at a time, past the page
cache (O_DIRECT, where the OS has it: extraction writes its rows that way too, so they are not in the cache,
and a verify of a large store does not push everything else out of it; benchmarks/bench_store.py measures
the checksums against extraction).  Opening a store checks ``sample`` (about 1 MiB
per file, so a whole file zeroed, overwritten or swapped for another store's is caught at once); ``full``
is checked by ``dstg-verify``.  Stores written before checksums existed have none and are read as before.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import xxhash

ALGORITHM = "xxh3_128"
SAMPLE_BLOCKS = 16
SAMPLE_BYTES = 1 << 16
_READ = 1 << 23  # a multiple of O_DIRECT's 4 KiB alignment
_THREADS = 2  # files read and hashed at once (xxhash and the reads let go of the GIL)


def _sample_offsets(size: int) -> list[int]:
    if size <= SAMPLE_BLOCKS * SAMPLE_BYTES:
        return [0]  # one block: the whole file
    last = size - SAMPLE_BYTES
    return [last * i // (SAMPLE_BLOCKS - 1) for i in range(SAMPLE_BLOCKS)]


def _sample_digest(handle, size: int) -> str:
    digest = xxhash.xxh3_128(str(size).encode())
    length = size if size <= SAMPLE_BLOCKS * SAMPLE_BYTES else SAMPLE_BYTES
    for offset in _sample_offsets(size):
        digest.update(os.pread(handle.fileno(), length, offset))
    return digest.hexdigest()


def _full_digest(path: Path) -> str:
    """xxh3-128 of every byte, read past the page cache where the OS allows (the same bytes either way: a
    direct read first writes back any of the file's pages still dirty in the cache)."""
    digest, buffer = xxhash.xxh3_128(), mmap.mmap(-1, _READ)  # anonymous maps are page-aligned, as O_DIRECT wants
    try:
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
        except OSError as err:
            if err.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                raise
            fd = os.open(path, os.O_RDONLY)  # a filesystem that refuses O_DIRECT (an older tmpfs): the page cache
        try:
            offset = 0
            while True:
                try:
                    count = os.preadv(fd, [buffer], offset)
                except OSError as err:
                    if err.errno != errno.EINVAL:
                        raise
                    # an alignment the filesystem does not take: the rest through the page cache
                    fd, direct = os.open(path, os.O_RDONLY), fd
                    os.close(direct)
                    count = os.preadv(fd, [buffer], offset)
                if not count:
                    return digest.hexdigest()
                with memoryview(buffer) as view:
                    digest.update(view[:count])
                offset += count
        finally:
            os.close(fd)
    finally:
        buffer.close()


def file_checksums(path: Path) -> dict:
    """{"bytes", "sample", "full"} of one file, in one read."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        sample = _sample_digest(handle, size)
    return {"bytes": size, "sample": sample, "full": _full_digest(path)}


def store_checksums(folder: Path, files: list[str]) -> dict:
    """The manifest's ``checksums`` entry for ``files`` of the store being written in ``folder``."""
    with ThreadPoolExecutor(_THREADS, thread_name_prefix="checksums") as pool:
        digests = list(pool.map(lambda name: file_checksums(folder / name), files))
    return {"algorithm": ALGORITHM, "sample_blocks": SAMPLE_BLOCKS, "sample_bytes": SAMPLE_BYTES,
            "files": dict(zip(files, digests))}


def store_file(folder: Path, name: str) -> Path:
    """``folder / name`` when it is a plain file inside the store; a StoreFileError naming it otherwise.  Every
    file a manifest names passes here before it is opened, so a FIFO, a device or a path out of the store
    (``/dev/zero``, ``../x``) is refused instead of blocking or reading forever (round 5: VFIFO, VZERO)."""
    folder = Path(folder)
    if not isinstance(name, str) or not name or Path(name).is_absolute() or ".." in Path(name).parts:
        raise StoreFileError(f"{folder}: the manifest names {name!r}, which is not a file inside the store")
    path = folder / name
    try:
        mode = os.lstat(path).st_mode
    except OSError as err:
        raise StoreFileError(f"{path} cannot be read ({err.strerror or err})") from None
    if not stat.S_ISREG(mode):
        raise StoreFileError(f"{path} is not a plain file (a FIFO, device, link or folder stands in its place)")
    return path


class StoreFileError(ValueError):
    """A file a manifest names is missing, outside the store or not a plain file: one line naming it."""


def open_plain(path: Path):
    """A binary handle on a plain file, opened without blocking (a FIFO swapped in after the check cannot
    hang the open) and checked again on the open descriptor."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StoreFileError(f"{path} is not a plain file (a FIFO, device, link or folder stands in its place)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def checksum_damage(folder: Path, manifest: dict, full: bool = False) -> str | None:
    """The first file of the store whose bytes are not those it was written with, in one line; None when
    every file matches (or the store has no checksums: written before they existed).  Checksums of another
    algorithm are damage too ("cannot verify"): nothing unchecked is ever passed as checked (round 5, M8)."""
    recorded = manifest.get("checksums") or {}
    if not isinstance(recorded, dict):
        return f"{folder}: the manifest's checksums are not a table; cannot verify the store"
    if not recorded.get("files"):
        return None
    if recorded.get("algorithm") != ALGORITHM:
        return (f"{folder}: cannot verify: the checksums were written with {recorded.get('algorithm')!r}, and this "
                f"dstg-interp checks {ALGORITHM}")
    blocks, block_bytes = recorded.get("sample_blocks"), recorded.get("sample_bytes")
    files = recorded.get("files")
    if not isinstance(files, dict):
        return f"{folder}: the manifest's checksums.files is not a table; cannot verify the store"
    for name, expected in files.items():
        try:
            path = store_file(Path(folder), name)
        except StoreFileError as err:
            return str(err)
        if not isinstance(expected, dict):
            return f"{path}: the manifest's checksum entry is not a table; cannot verify it"
        try:
            with open_plain(path) as handle:
                size = os.fstat(handle.fileno()).st_size
                if size != expected.get("bytes"):
                    return f"{path} has {size} bytes but the store was written with {expected.get('bytes')}"
                if full:
                    actual = _full_digest(path)
                elif (blocks, block_bytes) == (SAMPLE_BLOCKS, SAMPLE_BYTES):
                    actual = _sample_digest(handle, size)
                else:  # sampled another way by another version: only the full digest compares
                    continue
        except StoreFileError as err:
            return str(err)
        except OSError as err:
            return f"{path} cannot be read ({err.strerror or err})"
        if actual != expected.get("full" if full else "sample"):
            return f"{path} does not hold the bytes the store was written with (its {ALGORITHM} checksum differs)"
    return None
