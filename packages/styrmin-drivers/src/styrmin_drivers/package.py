"""Driver packages: read a folder or ``.tar.gz`` safely, and pack it into one canonical archive.

The canonical archive has the driver's files at its root, sorted, with fixed owners, times and modes,
so the same content always gives the same bytes and the same checksum, wherever it was packed from.
The checksum is the sha256 of the uncompressed canonical tar: it names the content, not the
compressor's output, so it stays the same across zlib versions.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import tarfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from styrmin_drivers.limits import (
    DRIVER_ARCHIVE_MAX_BYTES,
    DRIVER_CONTENT_MAX_BYTES,
    DRIVER_MAX_ENTRIES,
    DRIVER_PATH_MAX_LENGTH,
)
from styrmin_drivers.parsing import load_driver_spec
from styrmin_drivers.report import DriverError, DriverProblem
from styrmin_drivers.spec import SPEC_FILE_NAME, DriverSpec

IGNORED_NAMES = frozenset(
    {
        "__pycache__",
        ".git",
        ".hg",
        ".svn",
        ".DS_Store",
        ".pytest_cache",
        ".mypy_cache",
        ".ruff_cache",
        ".venv",
    }
)
"""Files and folders left out of a package: caches and version control, never part of a driver."""

IGNORED_SUFFIXES = (".pyc", ".pyo")

_FILE_MODE = 0o644
_EXECUTABLE_MODE = 0o755
_WHERE = "driver archive"


@dataclass(frozen=True)
class DriverFile:
    """One file of a driver: its content and whether it is executable."""

    content: bytes
    executable: bool = False


@dataclass(frozen=True)
class DriverPackage:
    """A driver read safely, with its spec, its canonical archive and that archive's checksum."""

    spec: DriverSpec
    files: Mapping[str, DriverFile]
    archive: bytes
    checksum: str

    @property
    def name(self) -> str:
        return self.spec.metadata.name

    @property
    def version(self) -> str:
        return self.spec.metadata.version

    def extract_to(self, directory: Path) -> Path:
        """Write the driver's files into ``directory`` (created if needed); returns ``directory``."""
        return write_driver_files(self.files, directory)


def write_driver_files(files: Mapping[str, DriverFile], directory: Path) -> Path:
    """Write ``files`` (paths relative to the driver's root, already checked) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, file in files.items():
        target = directory.joinpath(*PurePosixPath(name).parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(file.content)
        target.chmod(_EXECUTABLE_MODE if file.executable else _FILE_MODE)
    return directory


def read_driver(path: Path) -> DriverPackage:
    """Read the driver at ``path``: a folder, or a ``.tar.gz`` file.

    Raises:
        DriverError: if the driver is unsafe, too large, or its spec is not valid.
    """
    if path.is_dir():
        return package_driver_files(read_driver_folder_files(path))
    if not path.is_file():
        raise DriverError(
            [
                DriverProblem(
                    file=str(path),
                    message="no such folder or file; give a driver folder or a .tar.gz archive.",
                )
            ]
        )
    if path.stat().st_size > DRIVER_ARCHIVE_MAX_BYTES:
        raise _error(
            f"the archive is larger than {DRIVER_ARCHIVE_MAX_BYTES // (1024 * 1024)} MiB; "
            "leave out what the driver does not need.",
            file=str(path),
        )
    return read_driver_archive(path.read_bytes())


def read_driver_archive(data: bytes) -> DriverPackage:
    """Read a driver from ``.tar.gz`` bytes (or an uncompressed tar).

    The driver's files may be at the archive's root or inside one top folder. Symlinks, links,
    devices, absolute paths, ``..``, names that are not UTF-8, a path that is both a file and a
    folder, and archives past the limits of ``domain/limits.py`` are refused.

    Raises:
        DriverError: if the archive is unsafe, too large, or its spec is not valid.
    """
    return package_driver_files(read_driver_archive_files(data))


def pack_driver_folder(path: Path) -> bytes:
    """The canonical ``.tar.gz`` of the driver folder at ``path``.

    Raises:
        DriverError: if the folder holds symlinks or special files, or is too large.
    """
    return _gzip(_canonical_tar(read_driver_folder_files(path)))


def package_driver_files(files: Mapping[str, DriverFile]) -> DriverPackage:
    """A package of ``files`` (paths relative to the driver's root), with its spec checked.

    Raises:
        DriverError: if there is no spec, or the spec is not valid.
    """
    spec_file = files.get(SPEC_FILE_NAME)
    if spec_file is None:
        raise _error(f"{SPEC_FILE_NAME} is missing at the driver's root; add it there.")
    try:
        text = spec_file.content.decode("utf-8")
    except UnicodeDecodeError:
        raise _error("the file is not UTF-8 text; save it as UTF-8.", file=SPEC_FILE_NAME) from None
    spec = load_driver_spec(text)
    canonical = dict(sorted(files.items()))
    tar = _canonical_tar(canonical)
    return DriverPackage(
        spec=spec, files=canonical, archive=_gzip(tar), checksum=f"sha256:{hashlib.sha256(tar).hexdigest()}"
    )


def read_driver_folder_files(path: Path) -> dict[str, DriverFile]:
    """The files of the driver folder at ``path``, by path relative to it, without caches.

    Raises:
        DriverError: if the folder holds symlinks or special files, or is too large.
    """
    if not path.is_dir():
        raise DriverError([DriverProblem(file=str(path), message="not a folder; give the driver's folder.")])
    files: dict[str, DriverFile] = {}
    total = 0
    for entries, relative, full in _walk(path):
        _check_name(relative)
        _check_entries(entries)
        if full is None:
            continue
        mode = full.lstat().st_mode
        if stat.S_ISLNK(mode):
            raise _error("is a symlink; drivers may not hold symlinks: copy the file instead.", file=relative)
        if not stat.S_ISREG(mode):
            raise _error("is not a regular file; remove it from the driver.", file=relative)
        total += full.lstat().st_size
        _check_content(total)
        content = full.read_bytes()
        files[relative] = DriverFile(content, executable=bool(mode & 0o111))
    return files


def read_driver_archive_files(data: bytes) -> dict[str, DriverFile]:
    """The files of a driver archive, by path relative to the driver's root, checked for safety.

    Raises:
        DriverError: if the archive is unsafe, not a tar, or too large.
    """
    if len(data) > DRIVER_ARCHIVE_MAX_BYTES:
        raise _error(
            f"the archive is larger than {DRIVER_ARCHIVE_MAX_BYTES // (1024 * 1024)} MiB; "
            "leave out what the driver does not need."
        )
    # Unpacked as a stream: a gzip bomb is refused by the tar headers' sizes, or once it has given
    # the content limit, never by first holding all it expands to.
    stream: IO[bytes] = io.BytesIO(data)
    if data[:2] == b"\x1f\x8b":
        stream = gzip.GzipFile(fileobj=stream, mode="rb")  # type: ignore[assignment]
    bounded = _BoundedReader(stream, _UNPACKED_LIMIT)
    files: dict[str, DriverFile] = {}
    entries = total = 0
    try:
        with tarfile.open(fileobj=bounded, mode="r|", encoding="utf-8", errors="surrogateescape") as archive:
            for member in archive:
                entries += 1
                _check_entries(entries)
                name = _safe_member_name(member.name)
                if name is None:
                    continue
                _check_name(name)
                if member.isdir():
                    continue
                if member.issym() or member.islnk():
                    raise _error(
                        f"is a link to {member.linkname!r}; drivers may not hold links: "
                        "put the file itself in the archive.",
                        file=name,
                    )
                if not member.isfile():
                    raise _error("is not a regular file; remove it from the archive.", file=name)
                if _is_ignored(name):
                    continue
                total += member.size
                _check_content(total)
                if name in files:
                    raise _error("appears twice in the archive; pack each file once.", file=name)
                extracted = archive.extractfile(member)
                assert extracted is not None
                files[name] = DriverFile(extracted.read(member.size), executable=bool(member.mode & 0o111))
    except (tarfile.TarError, EOFError) as error:
        raise _error(
            f"not a valid tar archive ({error or type(error).__name__}); pack the driver with "
            "`tar czf driver.tar.gz -C DRIVER_FOLDER .`."
        ) from None
    except (OSError, zlib.error) as error:  # gzip.BadGzipFile is an OSError
        raise _error(
            f"not a valid gzip archive ({error}); pack the driver with "
            "`tar czf driver.tar.gz -C DRIVER_FOLDER .`."
        ) from None
    _check_file_or_folder(files)
    return _strip_top_folder(files)


_UNPACKED_LIMIT = DRIVER_CONTENT_MAX_BYTES + DRIVER_MAX_ENTRIES * 3 * 512 + 1024 * 1024
"""The most bytes an archive may unpack to: the content, plus tar headers and padding."""


class _BoundedReader(io.RawIOBase):
    """Reads ``source``, refusing to give more than ``limit`` bytes (however much a caller asks)."""

    def __init__(self, source: IO[bytes], limit: int) -> None:
        super().__init__()
        self._source = source
        self._left = limit

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        wanted = self._left + 1 if size is None or size < 0 else min(size, self._left + 1)
        data = self._source.read(wanted)
        self._left -= len(data)
        if self._left < 0:
            raise _error(
                "the archive unpacks to more than the size limit; leave out what the driver does not need."
            )
        return data

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _walk(root: Path) -> Iterator[tuple[int, str, Path | None]]:
    """Each entry under ``root`` (count so far, relative path, path; None for folders and left-out files)."""
    entries = 0
    for directory, folders, names in os.walk(root, followlinks=False):
        base = Path(directory)
        for folder in sorted(folders):
            entries += 1
            relative = (base / folder).relative_to(root).as_posix()
            if folder in IGNORED_NAMES:
                folders.remove(folder)
            elif (base / folder).is_symlink():
                raise _error(
                    "is a symlink; drivers may not hold symlinks: copy the folder instead.", file=relative
                )
            yield entries, relative, None
        folders.sort()
        for name in sorted(names):
            entries += 1
            full = base / name
            relative = full.relative_to(root).as_posix()
            yield entries, relative, None if _is_ignored(relative) else full


def _safe_member_name(raw: str) -> str | None:
    """The member's path relative to the archive's root, or ``None`` for the root itself."""
    if "\\" in raw or "\x00" in raw:
        raise _error(f"the path {raw!r} has a backslash or NUL; use plain relative paths.")
    path = PurePosixPath(raw)
    if path.is_absolute():
        raise _error(f"the path {raw!r} is absolute; archive paths must be relative to the driver's root.")
    parts = [part for part in path.parts if part != "."]
    if ".." in parts:
        raise _error(f"the path {raw!r} leaves the driver's folder with ..; archive paths must stay inside.")
    if not parts:
        return None
    return "/".join(parts)


def _is_ignored(name: str) -> bool:
    parts = PurePosixPath(name).parts
    return any(part in IGNORED_NAMES for part in parts) or name.endswith(IGNORED_SUFFIXES)


def _strip_top_folder(files: dict[str, DriverFile]) -> dict[str, DriverFile]:
    """Accept ``tar czf shop.tar.gz shop/``: the files inside one top folder that holds the spec."""
    if SPEC_FILE_NAME in files or not files:
        return files
    tops = {name.split("/", 1)[0] for name in files}
    if len(tops) == 1:
        top = tops.pop()
        if f"{top}/{SPEC_FILE_NAME}" in files:
            return {name.split("/", 1)[1]: file for name, file in files.items() if "/" in name}
    return files


def _check_name(name: str) -> None:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        shown = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        raise _error(f"the path {shown!r} is not UTF-8; rename it.") from None
    if len(name) > DRIVER_PATH_MAX_LENGTH:
        raise _error(f"the path is longer than {DRIVER_PATH_MAX_LENGTH} characters; shorten it.", file=name)


def _check_entries(count: int) -> None:
    if count > DRIVER_MAX_ENTRIES:
        raise _error(
            f"the driver holds more than {DRIVER_MAX_ENTRIES} entries (files and folders, caches "
            "included); leave out what it does not need."
        )


def _check_content(total: int) -> None:
    if total > DRIVER_CONTENT_MAX_BYTES:
        raise _error(
            f"the driver's files hold more than {DRIVER_CONTENT_MAX_BYTES // (1024 * 1024)} MiB; "
            "leave out what it does not need."
        )


def _check_file_or_folder(files: Mapping[str, DriverFile]) -> None:
    """Refuse a path that is a file and also the folder of another file (``x`` and ``x/y``)."""
    for name in sorted(files):
        parts = name.split("/")
        for end in range(1, len(parts)):
            folder = "/".join(parts[:end])
            if folder in files:
                raise _error(
                    f"is a file, and {name} is inside it as if it were a folder; "
                    "a path is either a file or a folder: rename one of them.",
                    file=folder,
                )


def _canonical_tar(files: Mapping[str, DriverFile]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:", format=tarfile.PAX_FORMAT) as archive:
        for name in sorted(files):
            file = files[name]
            info = tarfile.TarInfo(name)
            info.size = len(file.content)
            info.mode = _EXECUTABLE_MODE if file.executable else _FILE_MODE
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            archive.addfile(info, io.BytesIO(file.content))
    return buffer.getvalue()


def _gzip(tar: bytes) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as compressed:
        compressed.write(tar)
    return buffer.getvalue()


def _error(message: str, *, file: str = _WHERE) -> DriverError:
    return DriverError([DriverProblem(file=file, message=message)])
