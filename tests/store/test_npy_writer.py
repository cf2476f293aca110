"""NpyWriter's two write paths (whole pages past the page cache, the rest through it) and the checksums'
direct reads: the bytes on disk are np.save's whatever the path, the order of the blocks or the OS's answer."""

import errno
import io
import os

import numpy as np
import pytest
import xxhash

from dstg_interp.store import checksums, npy_writer
from dstg_interp.store.npy_writer import PAGE, NpyWriter


def saved_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def blocks_in_random_order(n: int, rng, cuts: int = 25) -> list[tuple[int, int]]:
    edges = [0, *np.sort(rng.choice(np.arange(1, n), cuts, replace=False)).tolist(), n]
    blocks = list(zip(edges[:-1], edges[1:]))
    rng.shuffle(blocks)
    return blocks


def fill(writer: NpyWriter, rows: np.ndarray, rng) -> NpyWriter:
    for start, stop in blocks_in_random_order(len(rows), rng):
        writer.write(start, rows[start:stop])
    return writer


def watch_direct_writes(monkeypatch, on_direct):
    """os.pwrite as it is, except that each write through the O_DIRECT descriptor set as the returned object's
    ``fd`` first goes to ``on_direct(offset, nbytes)``, which may raise."""
    real_pwrite = os.pwrite

    class Watch:
        fd = None

    def pwrite(fd, data, offset):
        if fd == Watch.fd:
            on_direct(offset, memoryview(data).nbytes)
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(npy_writer.os, "pwrite", pwrite)
    return Watch


@pytest.mark.parametrize("width, dtype", [(720, np.float16), (48, np.float16), (1, np.int64), (3, np.int32)])
def test_direct_writes_leave_np_save_bytes_in_any_block_order(width, dtype, tmp_path, monkeypatch):
    rng = np.random.default_rng(width)
    rows = rng.standard_normal((9_973, width)).astype(dtype)
    rows = rows[:, 0] if width == 1 else rows  # a label column: one value a row
    direct_writes: list[tuple[int, int]] = []
    watch = watch_direct_writes(monkeypatch, lambda offset, nbytes: direct_writes.append((offset, nbytes)))
    writer = NpyWriter(tmp_path / "a.npy", rows.shape, rows.dtype, direct=True)
    watch.fd = writer.direct_fd
    used_direct = fill(writer, rows, rng).direct_io
    writer.close()
    assert (tmp_path / "a.npy").read_bytes() == saved_bytes(rows)
    if used_direct:  # the filesystem took O_DIRECT: every write through it is whole, aligned pages
        assert direct_writes or rows.nbytes < 2 * npy_writer.DIRECT_MIN_BYTES
        assert all(offset % PAGE == 0 and length % PAGE == 0 for offset, length in direct_writes)


def test_a_refused_o_direct_leaves_the_page_cache_path(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((5_000, 96)).astype(np.float16)
    real_open = os.open

    def no_direct(path, flags, *mode):
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *mode)

    monkeypatch.setattr(npy_writer.os, "open", no_direct)
    writer = fill(NpyWriter(tmp_path / "open.npy", rows.shape, rows.dtype, direct=True), rows, rng)
    assert not writer.direct_io
    writer.close()
    assert (tmp_path / "open.npy").read_bytes() == saved_bytes(rows)

    monkeypatch.undo()
    refused = []

    def refuse(offset, nbytes):  # a filesystem that wants a larger alignment than 4 KiB
        refused.append(offset)
        raise OSError(errno.EINVAL, "Invalid argument")

    watch = watch_direct_writes(monkeypatch, refuse)
    writer = NpyWriter(tmp_path / "write.npy", rows.shape, rows.dtype, direct=True)
    watch.fd = writer.direct_fd
    fill(writer, rows, rng)
    assert not writer.direct_io and len(refused) <= 1  # refused once, then the page cache alone
    writer.close()
    assert (tmp_path / "write.npy").read_bytes() == saved_bytes(rows)


def test_other_write_errors_are_raised_not_swallowed(tmp_path, monkeypatch):
    rows = np.ones((4_096, 64), dtype=np.float16)
    writer = NpyWriter(tmp_path / "a.npy", rows.shape, rows.dtype, direct=True)

    def full_disk(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(npy_writer.os, "pwrite", full_disk)
    with pytest.raises(OSError) as raised:
        writer.write(0, rows)
    assert raised.value.errno == errno.ENOSPC
    writer.close()


@pytest.mark.parametrize("size", [0, 1, PAGE - 1, PAGE, 3 * checksums._READ + 12_345])
def test_full_digest_is_xxh3_of_every_byte_with_or_without_o_direct(size, tmp_path, monkeypatch):
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    expected = xxhash.xxh3_128(data).hexdigest()
    assert checksums.file_checksums(path)["full"] == expected
    monkeypatch.delattr(os, "O_DIRECT", raising=False)  # macOS: no such flag
    assert checksums.file_checksums(path)["full"] == expected


def test_a_block_larger_than_the_staging_buffer_goes_through_it_piece_by_piece(tmp_path, monkeypatch):
    monkeypatch.setattr(npy_writer, "STAGING_BYTES", 3 * PAGE)  # a 1.4 MB block: ~115 pieces of 3 pages
    rows = np.random.default_rng(1).standard_normal((1_000, 720)).astype(np.float16)
    writer = NpyWriter(tmp_path / "a.npy", rows.shape, rows.dtype, direct=True)
    writer.write(0, rows[:999])
    writer.write(999, rows[999:])
    writer.close()
    assert (tmp_path / "a.npy").read_bytes() == saved_bytes(rows)


def test_a_direct_read_refused_part_way_reads_the_rest_through_the_page_cache(tmp_path, monkeypatch):
    data = np.random.default_rng(3).integers(0, 256, 2 * checksums._READ + 99, dtype=np.uint8).tobytes()
    (tmp_path / "f.bin").write_bytes(data)
    real_preadv, calls = os.preadv, []

    def refuse_the_second(fd, buffers, offset):
        calls.append(offset)
        if len(calls) == 2:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(checksums.os, "preadv", refuse_the_second)
    assert checksums.file_checksums(tmp_path / "f.bin")["full"] == xxhash.xxh3_128(data).hexdigest()
    assert calls[:3] == [0, checksums._READ, checksums._READ]  # the refused read, read again

    def broken_disk(fd, buffers, offset):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(checksums.os, "preadv", broken_disk)
    with pytest.raises(OSError) as raised:
        checksums.file_checksums(tmp_path / "f.bin")
    assert raised.value.errno == errno.EIO  # not taken for a refusal
