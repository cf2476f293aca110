"""Output safety shared by every command: nothing lost, nothing half-done, one clear line when it goes wrong.

    from dstg_interp.io import check_output_location, check_replaceable, atomic_directory, commit_directory, output_lock

    check_output_location(out)                          # before any work: a file, or a folder we cannot write?
    check_replaceable(out, "an activation store", owned=is_store, overwrite=args.overwrite)
    with output_lock(out, "dstg-cache"):                # a second run on ``out`` stops here, naming the first
        with written_atomically(out) as tmp:            # .out.tmp-HOST-PID-xxxx beside ``out``
            ...write into tmp...                        # on success one atomic swap (commit_directory);
                                                        # on any error or signal the scratch is removed

The commands' shell (one line and exit code 2 for bad input, 130 for Ctrl-C, 143 for SIGTERM) is
``dstg_interp.cli.shell.run_cli``.

The rule every command follows: it replaces only what it recognisably wrote itself (a store with its
manifest, a checkpoint, a results folder), only when asked (``--overwrite``), never a plain file and
never a folder with anything else in it.  Temporary folders carry the host and pid of their writer, so
the next run on the same folder removes those of a killed run (and puts back a folder that a crash left
between the two renames of a commit on systems without an atomic swap).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

# Where every command and experiment script writes when no --out is given: a folder of the working directory,
# never a tracked file of the repository (its .gitignore lists dstg-results/, so a run at the repository root
# leaves `git status` clean).  The committed gallery and tables are rebuilt only when asked (--out figures/...).
RESULTS_DIR = Path("dstg-results")

DISK_FULL = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
_HOST = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


class OutputError(ValueError):
    """An output location that cannot or must not be written. One line: what, where, what to do."""


class OutputLocked(OutputError):
    """Another live run holds the output folder."""


# --- where output goes ----------------------------------------------------------------------------
def check_output_location(path: str | Path, flag: str = "--out") -> Path:
    """Fail before any work when ``path`` cannot become a folder we write into.

    Refuses a path that is a file, that lies under a file, or whose nearest existing parent does not let
    us create a file there (read-only, /proc, permissions).  Creates nothing that stays."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{flag} {path} is a file, not a folder; it is never replaced: choose another {flag}")
    probe = path
    while not probe.exists():
        if probe.is_symlink():
            raise OutputError(f"{flag} {path}: {probe} is a dangling link; choose another {flag}")
        parent = probe.parent
        if parent == probe:
            break
        probe = parent
    if not probe.is_dir():
        raise OutputError(f"{flag} {path} lies under {probe}, which is a file; choose another {flag}")
    try:  # os.access says yes for root on read-only mounts and /proc; only a real file says for sure
        handle, name = tempfile.mkstemp(prefix=".dstg-write-check-", dir=probe)
        os.close(handle)
        os.unlink(name)
    except OSError as err:
        raise OutputError(f"{flag} {path}: cannot write in {probe} ({err.strerror or err}); choose another {flag}") from None
    return path


def folder_entries(path: Path) -> list[str]:
    """Names in ``path``, without our own temporary and lock files."""
    return sorted(p.name for p in path.iterdir() if not _is_our_scratch(p.name))


def foreign_entries(path: Path, allowed: Iterable[str], required: Iterable[str] = ()) -> list[str]:
    """Names in ``path`` that are not ``allowed`` ones; all of them when a ``required`` name is missing."""
    names = folder_entries(path)
    if not set(required) <= set(names):
        return names
    return [name for name in names if name not in set(allowed)]


def foreign_now(path: Path, owned: Callable[[Path], bool | list[str]] | None) -> list[str]:
    """What ``path`` holds at this moment that the tool did not write: [] when it is absent, an empty folder or
    one ``owned`` recognises (True, or an empty list of entries that are not ours); a file or a link is foreign
    as a whole.  ``owned`` None: nothing in it is ours."""
    if not path.exists() and not path.is_symlink():
        return []
    if path.is_symlink() or not path.is_dir():
        return [path.name]
    entries = folder_entries(path)
    if not entries:
        return []
    verdict = owned(path) if owned is not None else False
    return entries if verdict is False else [] if verdict is True else list(verdict)


def files_listed(path: Path, allowed: Iterable[str], required: Iterable[str] = ()) -> bool:
    """True when ``path`` holds every ``required`` name and nothing but ``allowed`` ones: a folder we wrote."""
    return not foreign_entries(path, allowed, required)


def free_sibling(path: str | Path, suffix: str = "new") -> Path:
    """A folder name beside ``path`` that does not exist yet (``NAME-new``, ``NAME-new-2``, ...): what a
    refusal offers instead of a flag that would replace something."""
    path = Path(path)
    if path.name in ("", ".", ".."):  # '.', 'a/..': name the folder itself
        path = Path(os.path.abspath(path))
    base = path.with_name(f"{path.name}-{suffix}")
    candidate, count = base, 1
    while candidate.exists() or candidate.is_symlink():
        count += 1
        candidate = base.with_name(f"{base.name}-{count}")
    return candidate


def _contains(folder: Path, inner: Path) -> bool:
    folder, inner = Path(os.path.realpath(folder)), Path(os.path.realpath(inner))
    return folder == inner or folder in inner.parents


def check_outside_inputs(path: str | Path, inputs: Iterable[tuple[str, str | Path]], flag: str = "--out",
                         suffix: str = "new") -> None:
    """Refuse an output that lies inside one of its inputs (``(what, folder)`` pairs: "the store", ...): it would
    become a foreign entry of the input, or be read while written (round 4, X7)."""
    for what, source in inputs:
        if Path(source).exists() and _contains(Path(source), Path(path)):
            raise OutputError(f"{flag} {path} is inside {what} {source}; write it outside, such as "
                              f"{free_sibling(Path(os.path.abspath(source)), suffix)}")


def check_replaceable(path: str | Path, kind: str, owned: Callable[[Path], bool | list[str]], overwrite: bool,
                      flag: str = "--out", overwrite_flag: str = "--overwrite", inputs: Iterable[str | Path] = (),
                      suffix: str = "new") -> bool:
    """May ``path`` be replaced by a new ``kind`` (with its article: "a checkpoint")?  True when it exists and will be replaced, False when
    there is nothing there (or an empty folder); raises OutputError otherwise.

    ``owned(path)`` says whether the folder is recognisably one this tool wrote (a manifest, a checkpoint's
    files and nothing else): True/False, or the list of entries that are not ours (empty: all ours).
    Such a folder is replaced only with ``overwrite``; anything else never, nor a folder that is or holds one
    of the command's ``inputs``.  A refusal of something that is never replaced offers a new folder (named
    with ``suffix``), never the flag."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return False
    instead = f"choose another {flag}, such as {free_sibling(path, suffix)}"
    if path.is_symlink():
        raise OutputError(f"{flag} {path} is a symbolic link (to {os.readlink(path)}); it is never replaced: {instead}")
    if not path.is_dir():
        raise OutputError(f"{flag} {path} is a file, not {kind}; it is never replaced: {instead}")
    for source in inputs:
        if Path(source).exists() and _contains(path, Path(source)):
            what = "is" if _contains(Path(source), path) else "holds"
            inside = free_sibling(path / Path(os.path.realpath(source)).name, suffix) if what == "holds" else None
            raise OutputError(f"{flag} {path} {what} the input {source}; it is never replaced: "
                              + (f"choose a new folder, such as {inside}" if inside else instead))
    if not folder_entries(path):
        return False
    foreign = foreign_now(path, owned)
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise OutputError(f"{flag} {path} exists and is not {kind} written by dstg-interp (it holds {shown}); "
                          f"it is never replaced: {instead}")
    if not overwrite:
        raise OutputError(f"{flag} {path} already holds {kind}; pass {overwrite_flag} to replace it or choose another {flag}")
    return True


# --- atomic folders -------------------------------------------------------------------------------
_SCRATCH_RE = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-(?P<host>[A-Za-z0-9_.]+)-(?P<pid>\d+)(-[A-Za-z0-9_]+)?$")


def _is_our_scratch(name: str) -> bool:
    return bool(_SCRATCH_RE.match(name)) or name.startswith(".dstg-write-check-")


def _resolved(path: str | Path) -> Path:
    """Absolute, so that '.' or 'a/..' have a real name to put temporary siblings beside."""
    return Path(os.path.abspath(path))


def atomic_directory(path: str | Path) -> Path:
    """A fresh temporary sibling of ``path`` (named after this host and pid); ``commit_directory`` moves it
    into place.  Leftovers of killed runs on the same ``path`` are removed first."""
    path = _resolved(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temporaries(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-{_HOST}-{os.getpid()}-", dir=path.parent))
    os.chmod(tmp, 0o755)  # mkdtemp's 0700 would make shared outputs unreadable to others
    return tmp


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one system call (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    if _LIBC is None or not hasattr(_LIBC, "renameat2"):
        return False
    at_fdcwd, rename_exchange = -100, 2
    result = _LIBC.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EPERM):
        return False  # the filesystem (or a sandbox) cannot swap: fall back to two renames
    raise OSError(code, os.strerror(code), str(b))


def _load_libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


_LIBC = _load_libc() if sys.platform.startswith("linux") else None


def commit_directory(tmp: Path, path: str | Path, owned: Callable[[Path], bool | list[str]] | None = None,
                     kind: str = "output") -> None:
    """Put the complete folder ``tmp`` in place of ``path``: at every moment ``path`` is either the old
    complete content or the new one.  On Linux the two are swapped atomically; elsewhere a crash between
    the two renames leaves the old one as ``.NAME.old-HOST-PID``, which the next run on ``path`` restores.

    What is replaced is checked at the swap itself, not only when the run began (round 4, T1): ``path`` must be
    absent, empty or a folder ``owned`` recognises as one the tool wrote (None: holding only names that ``tmp``
    holds too), and no reader may hold it (``reading_lock``).  Otherwise ``path`` is left as it is, the new
    ``kind`` is moved to a free sibling and OutputError says where."""
    path = _resolved(path)
    owned = owned or (lambda old: foreign_entries(old, folder_entries(tmp)))
    for file in tmp.iterdir():
        if file.is_file():
            os.chmod(file, 0o644)
    with _swap_lock(path, tmp, kind):
        _refuse_foreign(tmp, path, foreign_now(path, owned), kind)
        if not path.exists() and not path.is_symlink():
            try:
                os.rename(tmp, path)  # onto nothing (or a folder that became empty): never onto content
                return
            except OSError as err:
                if err.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                    raise
                _refuse_foreign(tmp, path, foreign_now(path, owned) or [path.name], kind)  # it appeared just now
        if _exchange(tmp, path):
            swapped_out = foreign_now(tmp, owned)  # the old content as it was at the instant of the swap
            if swapped_out:
                _exchange(tmp, path)  # put it back, untouched
                _refuse_foreign(tmp, path, swapped_out, kind)
            shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the old content
            return
        old = path.with_name(f".{path.name}.old-{_HOST}-{os.getpid()}")
        os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)


def _refuse_foreign(tmp: Path, path: Path, foreign: list[str], kind: str, why: str | None = None) -> None:
    """Keep both: ``path`` as it is, the new ``kind`` in a free sibling; one OutputError line saying where."""
    if not foreign and why is None:
        return
    new = free_sibling(path)
    os.rename(tmp, new)
    if why is None:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        what = "is a file or a link now" if foreign == [path.name] and not path.is_dir() else f"now holds {shown}"
        why = f"{path} changed while this run wrote it: it {what}, which dstg-interp did not write"
    raise OutputError(f"{why}; it was left as it is and the new {kind} is in {new}")


@contextlib.contextmanager
def written_atomically(path: str | Path, owned: Callable[[Path], bool | list[str]] | None = None,
                       kind: str = "output"):
    """A scratch folder beside ``path`` (``atomic_directory``) to write into: when the block ends it replaces
    ``path`` in one swap (``commit_directory``, which checks again that ``path`` holds only what ``owned``
    recognises); on any error, Ctrl-C or SIGTERM it is removed, and ``path`` stays as it was."""
    tmp = atomic_directory(path)
    try:
        yield tmp
        commit_directory(tmp, path, owned, kind)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove_tree(path: str | Path) -> None:
    """``shutil.rmtree`` that a Ctrl-C or SIGTERM cannot cut short (half a temporary left behind): a signal
    that comes (or came just before) is held until the folder is gone, then handled as usual."""
    held: list[int] = []
    try:
        previous = {signum: signal.signal(signum, lambda number, frame: held.append(number))
                    for signum in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: signals are not ours to hold
        previous = {}
    try:
        shutil.rmtree(path, ignore_errors=True)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(held):
            handler = previous[signum]
            if callable(handler):
                handler(signum, None)  # e.g. raises KeyboardInterrupt / Terminated now
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), signum)


class SignalWatch:
    """Ctrl-C and SIGTERM during a wait inside C++ (torch's rendezvous and TCPStore), where Python's handlers run
    only once the wait returns -- after up to 15 minutes (round 4, L11).  Between ``start`` and ``stop`` the two
    signals go to a thread of their own, which prints ``line`` (``{how}``: Ctrl-C / SIGTERM) and ends the process
    at once, 130 / 143.  Only for waits before any work: nothing is cleaned up on that way out.

        watch = SignalWatch("dstg-launch: interrupted ({how}) while waiting for the other nodes")
        with watch:  # or watch.start() ... watch.stop(), which may come from elsewhere (twice is harmless)
            ...
    """

    _SIGNALS = {signal.SIGINT: ("Ctrl-C", 130), signal.SIGTERM: ("SIGTERM", 143)}
    _WAKE = signal.SIGUSR1  # sent to the watching thread alone, to end the watch

    def __init__(self, line: str):
        self.line = line
        self._thread: threading.Thread | None = None
        self._mask: set | None = None

    def start(self) -> None:
        if self._thread is not None or threading.current_thread() is not threading.main_thread():
            return
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, {*self._SIGNALS, self._WAKE})  # the thread inherits it
        self._thread = threading.Thread(target=self._watch, name="signal-watch", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        signum = signal.sigwait({*self._SIGNALS, self._WAKE})
        if signum == self._WAKE:
            return
        how, code = self._SIGNALS[signal.Signals(signum)]
        print(self.line.format(how=how), file=sys.stderr, flush=True)
        os._exit(code)

    def stop(self) -> None:
        thread, self._thread = self._thread, None
        if thread is None:
            return
        signal.pthread_kill(thread.ident, self._WAKE)
        thread.join()
        signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)  # a signal held meanwhile is handled as usual now

    def __enter__(self) -> SignalWatch:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but someone else's
        return True
    return True


def clean_stale_temporaries(path: str | Path) -> list[Path]:
    """Remove the temporary siblings of ``path`` left by killed runs on this host; returns what it removed.

    A folder left between the two renames of a commit (``.NAME.old-...``, ``path`` itself missing) is
    renamed back into place rather than removed: it is the last complete content."""
    path = _resolved(path)
    removed: list[Path] = []
    if not path.parent.is_dir():
        return removed
    for sibling in path.parent.iterdir():
        match = _SCRATCH_RE.match(sibling.name)
        if not match or match["name"] != path.name or match["host"] != _HOST:
            continue
        pid = int(match["pid"])
        if pid == os.getpid() or _pid_alive(pid):
            continue
        if match["kind"] == "old" and not path.exists():
            os.replace(sibling, path)
            continue
        shutil.rmtree(sibling, ignore_errors=True) if sibling.is_dir() else sibling.unlink(missing_ok=True)
        removed.append(sibling)
    return removed


@contextlib.contextmanager
def written_file(path: str | Path):
    """Yield a temporary name beside ``path`` (this process's own, so two processes writing the same file --
    two ranks filling one cache -- never share one); on success it replaces ``path`` (readers see the old or
    the new file), on failure it is removed."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{_HOST}-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write a text file under a temporary name, then rename it: readers see the old or the new file."""
    with written_file(path) as tmp:
        tmp.write_text(text)


def read_json_file(path: Path, error: type[Exception], hint: str = ""):
    """The JSON value in ``path``; text that is not JSON (or not UTF-8) is one ``error``, worded
    '<path>: not valid JSON (<why>)<hint>'.  Reading the file may raise OSError as usual."""
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise error(f"{path}: not valid JSON ({err}){hint}") from None


@contextlib.contextmanager
def created_folder(path: str | Path):
    """Create ``path`` (and missing parents) for the duration; if the block fails, the folders it created
    are removed again while still empty, so a failed write (a full disk) leaves no empty --out behind."""
    path = Path(path)
    missing = [p for p in [path, *path.parents] if not p.exists()]
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    except BaseException:
        for folder in missing:  # innermost first
            with contextlib.suppress(OSError):
                if not folder_entries(folder):
                    shutil.rmtree(folder)
        raise


# --- one run per output folder --------------------------------------------------------------------
def lock_path(path: str | Path) -> Path:
    """``.NAME.lock`` beside the real folder: every spelling of one folder (a symlink, '..') shares one lock."""
    path = Path(os.path.realpath(path))
    return path.with_name(f".{path.name}.lock")


_HELD: set[Path] = set()  # lock files this process holds exclusively (output_lock): a swap under it needs no other


class _Busy(Exception):
    def __init__(self, holders: str):
        self.holders = holders


def _take(lock: Path, mode: int):
    """An open handle on ``lock`` holding flock ``mode`` (LOCK_EX / LOCK_SH, never waiting); _Busy naming the
    holders otherwise.  A holder may remove the file between our open and our lock: then lock the live one."""
    while True:
        handle = open(lock, "a+")
        try:
            fcntl.flock(handle, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holders = _read_holders(handle.read())
            handle.close()
            raise _Busy(holders) from None
        try:
            if os.fstat(handle.fileno()).st_ino == os.stat(lock).st_ino:
                return handle
        except FileNotFoundError:
            pass
        handle.close()


def _holder_line(command: str | None) -> str:
    command = command or " ".join([Path(sys.argv[0]).name] + sys.argv[1:])
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": command,
                       "started": time.strftime("%Y-%m-%d %H:%M:%S")}) + "\n"


def _release(lock: Path, handle) -> None:
    """Drop our lock; the file goes with the last holder (a reader that finds others still there leaves it)."""
    with contextlib.suppress(OSError):
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(handle.fileno()).st_ino == os.stat(lock).st_ino:
            lock.unlink()
    handle.close()


@contextlib.contextmanager
def output_lock(path: str | Path, command: str | None = None, flag: str = "--out"):
    """Hold an exclusive lock on the output folder ``path`` (a ``.NAME.lock`` file beside it, so the
    folder itself can still be swapped atomically) for the duration; a second run -- or a reader of a store
    there (``reading_lock``) -- raises OutputLocked naming the holder (pid, host, command, start time).  The
    kernel drops the lock when a process dies."""
    lock = lock_path(path)
    made = [folder for folder in [lock.parent, *lock.parent.parents] if not folder.exists()]  # removed again if empty
    lock.parent.mkdir(parents=True, exist_ok=True)
    try:
        handle = _take(lock, fcntl.LOCK_EX)
    except _Busy as busy:
        raise OutputLocked(f"{flag} {path} is in use by another run ({busy.holders}); wait for it to finish or "
                           f"choose another {flag}") from None
    _HELD.add(lock)
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(_holder_line(command))
        handle.flush()
        yield lock
    finally:
        _HELD.discard(lock)
        with contextlib.suppress(OSError):
            lock.unlink()
        handle.close()
        for folder in made:  # innermost first; a folder the run filled stays
            with contextlib.suppress(OSError):
                folder.rmdir()


@contextlib.contextmanager
def reading_lock(path: str | Path, what: str = "the store", command: str | None = None):
    """Hold a shared lock on the folder ``path`` while reading it: writers (``output_lock``, the swap of
    ``commit_directory``) cannot replace it meanwhile, and a folder being written is refused here in one
    OutputLocked line naming the writer.  Readers share; where no lock file can be made (a read-only disk)
    nothing can replace the folder either, and it is read without one."""
    lock = lock_path(path)
    try:
        handle = _take(lock, fcntl.LOCK_SH)
    except _Busy as busy:
        raise OutputLocked(f"{what} {path} is being written by another run ({busy.holders}); wait for it to "
                           "finish, then read it") from None
    except OSError:  # read-only, or no permission to make the lock file
        yield None
        return
    try:
        with contextlib.suppress(OSError):
            with open(lock, "a") as appended:  # O_APPEND: readers' lines do not overwrite each other
                appended.write(_holder_line(command))
        yield lock
    finally:
        _release(lock, handle)


@contextlib.contextmanager
def _swap_lock(path: Path, tmp: Path, kind: str):
    """Exclusive hold on ``path`` for the instant of a swap: no reader may be reading it (round 4, X5)."""
    lock = lock_path(path)
    if lock in _HELD:  # this process's output_lock already keeps everyone else out
        yield
        return
    try:
        handle = _take(lock, fcntl.LOCK_EX)
    except _Busy as busy:
        _refuse_foreign(tmp, path, [], kind, why=f"{path} is in use by another run ({busy.holders}), so it was not "
                                                 "replaced")
    try:
        yield
    finally:
        _release(lock, handle)


def _read_holders(text: str) -> str:
    """The live holders recorded in a lock file (one JSON line each), or what to say when none is readable."""
    described = []
    for line in text.splitlines():
        try:
            holder = json.loads(line)
            if holder["host"] == socket.gethostname() and not _pid_alive(int(holder["pid"])):
                continue  # a reader that left its line behind
            described.append(f"pid {holder['pid']} on {holder['host']}, started {holder['started']}: {holder['command']}")
        except (ValueError, KeyError, TypeError):
            continue
    return "; ".join(dict.fromkeys(described)) or "a process that is still starting"
