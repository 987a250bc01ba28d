"""Driver packages: canonical archives and checksums, and unsafe archives refused."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from styrmin_backend.drivers import (
    DriverError,
    pack_driver_folder,
    read_driver,
    read_driver_archive,
)
from styrmin_drivers import package as package_module
from tests.drivers.conftest import EXAMPLE_DRIVER, SPEC, MakeDriver


def _tar(entries: list[tuple[tarfile.TarInfo, bytes | None]], compress: bool = True) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz" if compress else "w:") as archive:
        for info, content in entries:
            if content is not None:
                info.size = len(content)
            archive.addfile(info, io.BytesIO(content) if content is not None else None)
    return buffer.getvalue()


def _file(name: str, content: bytes) -> tuple[tarfile.TarInfo, bytes]:
    return tarfile.TarInfo(name), content


def _tar_of_folder(root: Path, arcname: str = ".") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(root, arcname=arcname)
    return buffer.getvalue()


def test_same_content_packs_to_the_same_bytes_and_checksum(make_driver: MakeDriver) -> None:
    first = make_driver(SPEC)
    second = make_driver(SPEC)
    os.utime(second / "actions.py", (1_000_000, 1_000_000))
    (second / "chart" / "Chart.yaml").chmod(0o600)

    assert pack_driver_folder(first) == pack_driver_folder(second)
    assert read_driver(first).checksum == read_driver(second).checksum


def test_folder_and_its_tar_gz_have_the_same_checksum(make_driver: MakeDriver) -> None:
    root = make_driver(SPEC)
    from_folder = read_driver(root)

    assert read_driver_archive(_tar_of_folder(root)).checksum == from_folder.checksum
    assert read_driver_archive(_tar_of_folder(root, arcname="demo-1.0.0")).checksum == from_folder.checksum
    assert read_driver_archive(from_folder.archive).checksum == from_folder.checksum
    assert read_driver_archive(from_folder.archive).archive == from_folder.archive


def test_changed_content_changes_the_checksum(make_driver: MakeDriver) -> None:
    root = make_driver(SPEC)
    before = read_driver(root)
    (root / "actions.py").write_text((root / "actions.py").read_text() + "\n# a comment\n")

    after = read_driver(root)

    assert after.checksum != before.checksum
    assert (after.name, after.version) == (before.name, before.version) == ("demo", "1.0.0")
    assert before.checksum.startswith("sha256:") and len(before.checksum) == 7 + 64


def test_checksum_ignores_caches_and_compression(make_driver: MakeDriver) -> None:
    root = make_driver(SPEC)
    before = read_driver(root).checksum
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "actions.cpython-311.pyc").write_bytes(b"\x00cache")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")

    assert read_driver(root).checksum == before
    tar = gzip.decompress(read_driver(root).archive)
    assert read_driver_archive(gzip.compress(tar, compresslevel=1)).checksum == before
    assert read_driver_archive(tar).checksum == before


def test_extract_to_writes_the_files_back(make_driver: MakeDriver, tmp_path: Path) -> None:
    root = make_driver(SPEC)
    (root / "run.sh").write_text("#!/bin/sh\n")
    (root / "run.sh").chmod(0o755)
    package = read_driver(root)

    target = package.extract_to(tmp_path / "extracted")

    assert sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file()) == [
        "actions.py",
        "chart/Chart.yaml",
        "chart/templates/workloads.yaml",
        "driver.styrmin.yml",
        "run.sh",
    ]
    assert (target / "actions.py").read_bytes() == (root / "actions.py").read_bytes()
    assert os.access(target / "run.sh", os.X_OK) and not os.access(target / "actions.py", os.X_OK)
    assert read_driver(target).checksum == package.checksum


def test_package_exposes_its_spec(make_driver: MakeDriver) -> None:
    package = read_driver(make_driver(SPEC))
    assert package.spec.spec.application.default_version == "1.0.0"
    assert [c.name for c in package.spec.spec.components] == ["server", "worker"]


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("../evil.py", "leaves the driver's folder with .."),
        ("chart/../../evil.py", "leaves the driver's folder with .."),
        ("/etc/evil.py", "is absolute"),
        ("chart\\..\\evil.py", "backslash"),
    ],
)
def test_paths_leaving_the_driver_are_refused(name: str, message: str) -> None:
    data = _tar([_file("driver.styrmin.yml", SPEC.encode()), _file(name, b"x")])
    with pytest.raises(DriverError, match=message):
        read_driver_archive(data)


def test_symlink_in_an_archive_is_refused() -> None:
    link = tarfile.TarInfo("actions.py")
    link.type = tarfile.SYMTYPE
    link.linkname = "/etc/passwd"
    data = _tar([_file("driver.styrmin.yml", SPEC.encode()), (link, None)])

    with pytest.raises(DriverError) as raised:
        read_driver_archive(data)
    assert str(raised.value) == (
        "actions.py: is a link to '/etc/passwd'; drivers may not hold links: put the file itself in the archive."
    )


def test_hard_link_and_device_in_an_archive_are_refused() -> None:
    hard = tarfile.TarInfo("copy.py")
    hard.type = tarfile.LNKTYPE
    hard.linkname = "driver.styrmin.yml"
    with pytest.raises(DriverError, match="drivers may not hold links"):
        read_driver_archive(_tar([_file("driver.styrmin.yml", SPEC.encode()), (hard, None)]))
    device = tarfile.TarInfo("tty")
    device.type = tarfile.CHRTYPE
    with pytest.raises(DriverError, match="is not a regular file"):
        read_driver_archive(_tar([_file("driver.styrmin.yml", SPEC.encode()), (device, None)]))


def test_symlink_in_a_folder_is_refused(make_driver: MakeDriver) -> None:
    root = make_driver(SPEC)
    (root / "secrets.py").symlink_to("/etc/passwd")

    with pytest.raises(DriverError, match=r"secrets.py: is a symlink; drivers may not hold symlinks"):
        pack_driver_folder(root)


def test_archive_too_large_when_unpacked_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(package_module, "DRIVER_CONTENT_MAX_BYTES", 64 * 1024)
    bomb = _tar([_file("driver.styrmin.yml", SPEC.encode()), _file("zeros.bin", b"\x00" * (4 * 1024 * 1024))])
    assert len(bomb) < 64 * 1024

    with pytest.raises(DriverError, match=r"unpacks to more than the size limit|hold more than"):
        read_driver_archive(bomb)


def test_too_many_files_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(package_module, "DRIVER_MAX_ENTRIES", 3)
    entries = [_file("driver.styrmin.yml", SPEC.encode())] + [_file(f"f{i}.txt", b"x") for i in range(3)]
    with pytest.raises(DriverError, match="more than 3 entries"):
        read_driver_archive(_tar(entries))


def _folder(name: str) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info, None


def test_folders_and_left_out_files_count_toward_the_entry_limit(
    monkeypatch: pytest.MonkeyPatch, make_driver: MakeDriver
) -> None:
    monkeypatch.setattr(package_module, "DRIVER_MAX_ENTRIES", 4)
    spec = _file("driver.styrmin.yml", SPEC.encode())
    folders = [spec, _folder("a"), _folder("a/b"), _folder("a/b/c"), _folder("a/b/c/d")]
    caches = [spec] + [_file(f"__pycache__/m{i}.pyc", b"x") for i in range(4)]
    for entries in (folders, caches):
        with pytest.raises(DriverError, match="more than 4 entries"):
            read_driver_archive(_tar(entries))
    root = make_driver(SPEC, files={f"__pycache__/m{i}.pyc": "x" for i in range(4)})
    with pytest.raises(DriverError, match="more than 4 entries"):
        pack_driver_folder(root)


def test_names_that_are_not_utf8_are_refused(make_driver: MakeDriver) -> None:
    info = tarfile.TarInfo("bad")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:", format=tarfile.USTAR_FORMAT, encoding="latin-1") as archive:
        archive.addfile(tarfile.TarInfo("driver.styrmin.yml"), io.BytesIO(b""))
        info = tarfile.TarInfo("caf\xe9.py")
        archive.addfile(info, io.BytesIO(b""))
    with pytest.raises(DriverError, match=r"is not UTF-8; rename it"):
        read_driver_archive(gzip.compress(raw.getvalue()))
    root = make_driver(SPEC)
    (root / os.fsdecode(b"caf\xe9.py")).write_text("")
    with pytest.raises(DriverError, match=r"is not UTF-8; rename it"):
        pack_driver_folder(root)


def test_a_path_that_is_both_a_file_and_a_folder_is_refused() -> None:
    entries = [_file("driver.styrmin.yml", SPEC.encode()), _file("x", b"file"), _file("x/y", b"inside")]
    with pytest.raises(DriverError) as raised:
        read_driver_archive(_tar(entries))
    assert str(raised.value.problems[0]) == (
        "x: is a file, and x/y is inside it as if it were a folder; a path is either a file or a folder: "
        "rename one of them."
    )


def test_gzip_bomb_is_refused_without_holding_what_it_unpacks_to() -> None:
    # 1 GiB of zeros in a file: gzip members of 1 MiB of zeros each, about 1 MB in all.
    header = tarfile.TarInfo("zeros.bin")
    header.size = 1024**3
    spec_info, content = _file("driver.styrmin.yml", SPEC.encode())
    spec_info.size = len(content)
    spec = spec_info.tobuf() + content + b"\0" * (-len(content) % 512)
    zeros = gzip.compress(b"\0" * (1024 * 1024))
    bomb = gzip.compress(spec + header.tobuf()) + zeros * 1025
    assert len(bomb) < 2 * 1024 * 1024

    tracemalloc.start()
    try:
        with pytest.raises(DriverError, match=r"hold more than 128 MiB|unpacks to more than"):
            read_driver_archive(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024


def test_archive_without_a_spec_or_not_an_archive_is_refused() -> None:
    with pytest.raises(DriverError, match=r"driver.styrmin.yml is missing at the driver's root"):
        read_driver_archive(_tar([_file("actions.py", b"")]))
    with pytest.raises(DriverError, match="not a valid gzip archive"):
        read_driver_archive(b"\x1f\x8b" + b"garbage" * 10)
    with pytest.raises(DriverError, match="not a valid tar archive"):
        read_driver_archive(b"plain text, not a tar")


def test_archive_with_an_invalid_spec_reports_its_problems() -> None:
    data = _tar([_file("driver.styrmin.yml", SPEC.replace("mode: pre", "mode: later").encode())])
    with pytest.raises(DriverError) as raised:
        read_driver_archive(data)
    assert [str(p) for p in raised.value.problems] == [
        'driver.styrmin.yml, line 23, spec.actions[0].mode: "later" is not a mode; use pre, core or post.'
    ]


def test_example_driver_packs_deterministically() -> None:
    first, second = read_driver(EXAMPLE_DRIVER), read_driver(EXAMPLE_DRIVER)
    assert first.archive == second.archive and first.checksum == second.checksum
    assert (first.name, first.version) == ("shop", "1.0.0")
