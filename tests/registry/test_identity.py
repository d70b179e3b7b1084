"""Names, versions and metadata a registry accepts, and the package digest."""

from __future__ import annotations

import json
import zipfile

import pytest
from aotpack.packages import identity, layout
from aotpack.packages.digest import package_digest
from aotpack.packages.reader import read_package, verify_digests
from aotpack.packages.writer import canonical_json, sha256

from .synthetic import write


@pytest.mark.parametrize("name", ["mlp", "gpt2-small", "bert_base.v2", "a", "x" * 128, "llama-3.1-8b"])
def test_registry_safe_names_pass(name):
    assert identity.check_name(name) == name


@pytest.mark.parametrize("name", ["my model/../x", "MLP", "-mlp", "mlp-", "a..b", "a/b", "", "x" * 129, "é", "a b"])
def test_unsafe_names_are_refused_with_the_rule(name):
    with pytest.raises(identity.IdentityError, match="lowercase letters and digits"):
        identity.check_name(name)


@pytest.mark.parametrize("text, name", [("MyNet", "mynet"), ("my model", "my-model"), ("mlp", "mlp"),
                                        ("Net__v2!", "net-v2")])
def test_default_names_are_made_registry_safe(text, name):
    assert identity.name_from(text) == name


@pytest.mark.parametrize("version", ["0.1.0", "1.0.0", "10.20.30", "1.0.0-rc.1", "1.0.0-alpha.beta+exp.sha.5114f85",
                                     "2.0.0+build.7"])
def test_semantic_versions_pass(version):
    assert str(identity.parse_version(version)) == version


@pytest.mark.parametrize("version", ["banana", "1.0", "1", "01.0.0", "1.0.0-", "1.0.0+", "v1.0.0", "1.0.0-01", " 1.0.0"])
def test_other_versions_are_refused_with_the_rule(version):
    with pytest.raises(identity.IdentityError, match="MAJOR.MINOR.PATCH"):
        identity.parse_version(version)


def test_semver_precedence():
    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2", "1.0.0-beta.11",
               "1.0.0-rc.1", "1.0.0", "1.0.1", "1.1.0", "2.0.0"]
    keys = [identity.parse_version(v).precedence() for v in ordered]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert identity.parse_version("1.0.0+a").precedence() == identity.parse_version("1.0.0+b").precedence()


def test_meta_options():
    assert identity.parse_meta_options(["license=MIT", "source.revision=abc=1"]) == {
        "license": "MIT", "source.revision": "abc=1"}
    with pytest.raises(identity.IdentityError, match="expected KEY=VALUE"):
        identity.parse_meta_options(["license"])
    with pytest.raises(identity.IdentityError, match="given twice"):
        identity.parse_meta_options(["a=1", "a=2"])
    with pytest.raises(identity.IdentityError, match="is not allowed"):
        identity.parse_meta_options(["bad key=1"])
    with pytest.raises(identity.IdentityError, match="metadata values are strings"):
        identity.check_metadata({"epochs": 3})


def test_digest_is_the_sha256_of_the_stored_canonical_manifest(tmp_path):
    path = write(tmp_path / "p.aotpack")
    package = read_package(path)
    stored = zipfile.ZipFile(path).read(layout.MANIFEST)
    assert package.digest == "sha256:" + sha256(stored) == package_digest(canonical_json(package.manifest))
    assert verify_digests(package) == []
    # The manifest lists every other member's digest, so the digest covers them.
    assert set(package.manifest["members"]) == set(package.members)


def test_a_changed_weight_changes_the_digest(tmp_path):
    from .synthetic import weights

    a = read_package(write(tmp_path / "a.aotpack"))
    b = read_package(write(tmp_path / "b.aotpack", tensors=weights(seed=1)))
    assert a.digest != b.digest


def test_a_reformatted_manifest_is_refused(tmp_path):
    path = write(tmp_path / "p.aotpack")
    package = read_package(path)
    # The same value with other whitespace: the writer would never make it, so it was edited by hand.
    edited = json.dumps(package.manifest, indent=2, sort_keys=True).encode()
    from aotpack.packages.reader import Package

    problems = verify_digests(Package(path, package.manifest, package.members, edited))
    assert any("not in canonical form" in p for p in problems)


@pytest.mark.parametrize("args, message", [
    (["--name", "my model/../x"], "--name 'my model/../x' is not a registry-safe package name"),
    (["--version", "banana"], "--version 'banana' is not a semantic version: use MAJOR.MINOR.PATCH"),
    (["--meta", "license"], "--meta 'license': expected KEY=VALUE"),
    (["--meta", "a=1", "--meta", "a=2"], "--meta a: given twice"),
])
def test_export_refuses_bad_identity_in_one_line(args, message, tmp_path):
    from .exports import AOTPACK, MLP, run

    out = tmp_path / "x.aotpack"
    result = run([*AOTPACK, "export", str(MLP), *args, "-o", str(out)])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: " + message)
    assert "capturing" not in result.stderr  # refused before any work
    assert not out.exists()


def test_python_build_api_checks_identity(tmp_path):
    from aotpack.build import build_package

    # The checks come first, so no captured program is needed to see them refuse.
    with pytest.raises(identity.IdentityError, match="name 'Bad Name' is not a registry-safe"):
        build_package(None, tmp_path / "x.aotpack", name="Bad Name")
    with pytest.raises(identity.IdentityError, match="version '1.0' is not a semantic version"):
        build_package(None, tmp_path / "x.aotpack", name="ok", version="1.0")
    with pytest.raises(identity.IdentityError, match="metadata values are strings"):
        build_package(None, tmp_path / "x.aotpack", name="ok", metadata={"epochs": 3})


def test_export_inspect_verify_print_the_digest_and_metadata(mlp_package):
    from .exports import AOTPACK, run

    package = read_package(mlp_package)
    assert package.manifest["user_metadata"] == {"license": "MIT", "source.revision": "0123abc"}
    assert package.manifest["name"] == "mlp" and package.manifest["version"] == "1.0.0"
    inspected = run([*AOTPACK, "inspect", str(mlp_package)])
    assert f"digest:   {package.digest}" in inspected.stdout
    assert "meta:     license=MIT" in inspected.stdout and "meta:     source.revision=0123abc" in inspected.stdout
    verified = run([*AOTPACK, "verify", str(mlp_package)])
    assert verified.returncode == 0 and f"package digest {package.digest}" in verified.stdout
    exported_again = run([*AOTPACK, "export", "examples/mlp/model.py", "--dynamic", "batch=1..64", "--version", "1.0.0",
                          "--meta", "license=MIT", "--meta", "source.revision=0123abc", "--no-verify",
                          "-o", str(mlp_package.with_name("again.aotpack"))])
    assert exported_again.returncode == 0 and "digest sha256:" in exported_again.stderr


def test_a_change_outside_the_members_is_found_by_the_container_check(tmp_path):
    path = write(tmp_path / "p.aotpack")
    data = bytearray(path.read_bytes())
    data[10] ^= 0x01  # the first local header's modification time: no member's bytes change
    changed = tmp_path / "changed.aotpack"
    changed.write_bytes(bytes(data))
    package = read_package(changed)
    assert package.members == read_package(path).members and package.digest == read_package(path).digest
    assert verify_digests(package) == [
        (f"the zip container differs from the layout aotpack writes for these members at byte 10 "
         f"(file {len(data)} bytes, expected {len(data)})")]


def test_python_export_api_records_metadata_and_makes_default_names_registry_safe(tmp_path, runtime_build):
    import aotpack
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Tanh())
    x = torch.randn(2, 8)
    result = aotpack.export(model, (x,), tmp_path / "MyNet.aotpack", version="2.1.0", verify="off",
                            metadata={"license": "Apache-2.0", "source.revision": "feedbeef"})
    package = read_package(result.path)
    assert package.manifest["name"] == "mynet" and package.manifest["version"] == "2.1.0"
    assert package.manifest["user_metadata"] == {"license": "Apache-2.0", "source.revision": "feedbeef"}
    with pytest.raises(identity.IdentityError, match="version 'v2' is not a semantic version"):
        aotpack.export(model, (x,), tmp_path / "x.aotpack", version="v2", verify="off")
    with pytest.raises(identity.IdentityError, match="name 'My Net' is not a registry-safe package name"):
        aotpack.export(model, (x,), tmp_path / "x.aotpack", name="My Net", verify="off")
    assert not (tmp_path / "x.aotpack").exists()
