"""The `aotpack` command: export, inspect, verify (and sign, diff, refit, publish from cli_registry.py).

Every error a user can cause ends as one `error: ...` line and exit status 1, never a traceback
(AOTPACK_TRACEBACK=1 shows it, for reporting bugs).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from .errors import AotpackError


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(1)


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (AotpackError, OSError) as e:
            if os.environ.get("AOTPACK_TRACEBACK"):
                raise
            _fail(str(e))


def _print_triton_backend_dir(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from .serving import triton_backend_dir

    try:
        click.echo(triton_backend_dir())
    except AotpackError as e:
        _fail(str(e))
    ctx.exit()


def _print_cmake_dir(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from . import runtime_files

    try:
        click.echo(runtime_files.cmake_dir())
    except AotpackError as e:
        _fail(str(e))
    ctx.exit()


@click.group(cls=_Group)
@click.version_option(package_name="aotpack")
@click.option("--triton-backend-dir", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_triton_backend_dir,
              help="Print the folder to pass to tritonserver --backend-directory, and exit.")
@click.option("--cmake-dir", is_flag=True, expose_value=False, is_eager=True, callback=_print_cmake_dir,
              help="Print the folder of the runtime's CMake package (for CMAKE_PREFIX_PATH or aotpack_DIR) and exit.")
def main() -> None:
    """Export PyTorch models to one self-contained package that a C++ runtime runs."""


@main.command()
@click.argument("model_file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Package path (default: NAME.aotpack).")
@click.option("--dynamic", "dynamic", multiple=True, metavar="NAME=MIN..MAX",
              help="A dynamic dimension's inclusive range; repeatable; overrides model.py's ranges.")
@click.option("--name", help="Package name (default: the model's folder, or the file's stem).")
@click.option("--version", "version", default="0.1.0", show_default=True, help="Package version (semver).")
@click.option("--meta", "meta", multiple=True, metavar="KEY=VALUE",
              help="User metadata for the manifest (license, source revision, ...); repeatable.")
@click.option("--dump", "dump", multiple=True, metavar="STAGE",
              help="Print a lowering stage's output; repeatable. The stages are the targets': lower, "
                   "prepack_weights (cpu), transpose_kn_weights (cuda), plan_memory, render_cpp and compile_cpp "
                   "(cpu), render_triton and compile_triton (cuda), serialize.")
@click.option("--dtype", "dtype", metavar="DTYPE", help="Cast floating weights and inputs first: fp32, bf16 or fp16.")
@click.option("--verify", "verify", type=click.Choice(["range", "example", "off"]), default="range", show_default=True,
              help="Run the package against PyTorch before writing it: at the examples and the ends and inside of "
                   "every declared range, at the examples only, or not at all.")
@click.option("--no-verify", is_flag=True, help="The same as --verify=off.")
@click.option("--target", "target", default="cpu", show_default=True, metavar="cpu|cuda|cpu,cuda",
              help="What the package runs on; CUDA kernels are Triton, cross-compiled to cubins (no GPU needed).")
@click.option("--cuda-arch", "cuda_arch", metavar="CC[,CC...]",
              help="CUDA compute capabilities to build cubins for, e.g. 80,90 (default: the local GPU's, else 90).")
@click.option("--tune/--no-tune", "tune", default=None,
              help="Time CUDA kernel configurations on the local GPU and keep the fastest (default: on when the "
                   "local GPU is of the target architecture; without one, configuration tables choose).")
@click.option("-q", "--quiet", is_flag=True, help="Print only the final line (and errors).")
def export(model_file: str, output: str | None, dynamic: tuple[str, ...], name: str | None, version: str,
           dump: tuple[str, ...], dtype: str | None, verify: str, no_verify: bool, target: str, cuda_arch: str | None,
           tune: bool | None, quiet: bool, meta: tuple[str, ...]) -> None:
    """Capture MODEL_FILE with torch.export and write one .aotpack package."""
    from . import knobs, progress
    from .api import export_model_file
    from .build import default_name
    from .lowering.stages import stage_names
    from .lowering.targets import parse_targets

    targets = parse_targets(target, cuda_arch, knobs.cpu_isa(), tune)
    stages = stage_names(targets)
    unknown = [s for s in dump if s not in stages]
    if unknown:
        _fail(f"--dump {unknown[0]}: no such stage for --target {target}; its stages are {', '.join(stages)}")
    if not Path(model_file).is_file():
        _fail(f"{model_file}: no such file; pass the path of a model.py")
    metadata = _checked_identity(name, version, meta)
    output = output or f"{name or default_name(Path(model_file))}.aotpack"
    click.echo(f"exporting {model_file} -> {output}", err=True)
    # The stream as it is now: torch's tracing runs under quiet_torch(), which swaps sys.stderr for a buffer, and
    # the heartbeat lines written during it ("still working") would arrive only when it ends.
    console = sys.stderr
    report = progress.Progress(None if quiet else lambda line: click.echo(line, file=console))
    start = time.perf_counter()
    with progress.reporting(report):
        result = export_model_file(
            model_file, output, dynamic=dynamic, dtype=dtype, target=target, cuda_arch=cuda_arch, tune=tune, name=name,
            version=version, metadata=metadata, verify="off" if no_verify else verify, dump_stages=dump,
            dump=lambda stage, text: click.echo(f"--- {stage} ---\n{text}"))
    signature = result.manifest["signature"]
    symbols = ", ".join(f"{s['name']}={s['min']}..{s['max']}" for s in signature["symbols"]) or "static shapes"
    click.echo(f"wrote {result.path} ({result.size / 1e6:.2f} MB, {symbols}) in {time.perf_counter() - start:.1f} s; "
               f"{_verified(result.verification)}", err=True)
    click.echo(f"digest {_digest(result.path)}", err=True)
    for entry in (result.verification or {}).get("not_verified", []):
        click.echo(f"not verified on {entry['target']}: {entry['reason']}", err=True)
    if not quiet:
        click.echo(f"  time: {report.summary()}", err=True)


def _checked_identity(name: str | None, version: str, meta: tuple[str, ...]) -> dict[str, str]:
    """--name, --version and --meta checked before anything slow runs; the --meta dict."""
    from .packages import identity

    if name is not None:
        identity.check_name(name)
    identity.check_version(version)
    return identity.parse_meta_options(meta)


def _digest(path: str | Path) -> str:
    from .packages.reader import read_package

    return read_package(path).digest


def _verified(record: dict[str, Any] | None) -> str:
    if record is None:
        return "not verified (--verify=off)"
    points = [p for p in record["points"] if "device" in p]
    if not points:
        return "NOT VERIFIED: no target in the package runs on this machine"
    worst = max((o["error"] for p in points for o in p["outputs"] if isinstance(o["error"], float)), default=0.0)
    devices = ", ".join(sorted({p["device"] for p in points}))
    count = len({tuple(sorted(p["symbols"].items())) for p in points})
    skipped = len(record["points"]) - len(points)
    zero = record.get("all_zero_outputs")
    return (f"verified at {count} point(s) on {devices} (worst rel err {worst:.1e})"
            + (f"; {skipped} point(s) SKIPPED (see above)" if skipped else "")
            + (f"; output(s) {', '.join(zero)} all zeros in eager at every point: unchecked" if zero else ""))


def _shape(shape: list[Any]) -> str:
    return "[" + ", ".join(json.dumps(d) if not isinstance(d, str) else d for d in shape) + "]"


def _bucket_lines(cuda: dict[str, Any] | None) -> list[str]:
    """The CUDA steps with kernels per bucket of a size, each distinct set once: its buckets' configurations."""
    from .packages.program import format_size

    if not cuda:
        return []
    config = {k["name"]: k for k in cuda["kernels"]}

    def describe(name: str) -> str:
        c = config[name].get("config")
        return " ".join(f"{k}={v}" for k, v in c.items()) if c else name

    def launched(entry: dict[str, Any]) -> str:  # what this runtime launches: a split-K kernel before its twin
        return entry["split"]["kernel"] if "split" in entry else entry["kernel"]

    groups: dict[tuple, int] = {}
    for step in cuda["steps"]:
        if "variants" in step:
            v = step["variants"]
            key = (json.dumps(v["size"]), tuple((b["upto"], launched(b)) for b in v["buckets"]), launched(step))
            groups[key] = groups.get(key, 0) + 1
    lines = [(f"cuda:     {len(cuda['kernels'])} kernels; {sum(groups.values())} of {len(cuda['steps'])} steps have "
              "kernels per bucket of a size:")] if groups else []
    for (size, buckets, whole), count in groups.items():
        family = config[whole].get("family", "kernel")
        lines.append(f"  {count} {family} step(s), buckets of {format_size(json.loads(size))}:")
        lines += [f"    <= {upto}: {describe(kernel)}" for upto, kernel in buckets]
        lines.append(f"    above: {describe(whole)}")
    return lines


@main.command()
@click.argument("package", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
def inspect(package: str, as_json: bool) -> None:
    """Show a package's identity, signature with ranges, sizes and kernels."""
    from .packages import layout
    from .packages.reader import read_package

    pkg = read_package(package)
    m = pkg.manifest
    if as_json:
        click.echo(json.dumps(m, indent=1, sort_keys=True))
        return
    program = pkg.program
    sig = m["signature"]
    click.echo(f"{m['name']} {m['version']}  ({m['format']} format {m['format_version']})")
    click.echo(f"digest:   {pkg.digest}")
    click.echo("producer: " + ", ".join(f"{k} {v}" for k, v in sorted(m["producer"].items())))
    click.echo("targets:  " + ", ".join(
        f"cuda {' '.join(f'sm_{a}' for a in t.get('archs', []))} (PTX {t.get('ptx_version')}, driver >= "
        f"{t.get('min_driver_version', 0) // 1000}.{t.get('min_driver_version', 0) % 1000 // 10}, configurations "
        f"from {'tuning on a GPU' if t.get('configurations') == 'tuned' else 'tables'})" if t["kind"] == "cuda"
        else f"{t['kind']} {t.get('arch', '')} {t.get('isa', '')}".strip() for t in m["targets"]))
    click.echo("symbols:  " + (", ".join(f"{s['name']} in {s['min']}..{s['max']}" for s in sig["symbols"]) or "none (static)"))
    for kind in ("inputs", "outputs"):
        for t in sig[kind]:
            click.echo(f"{kind[:-1]:>7}:  {t['name']}: {t['dtype']}{_shape(t['shape'])}")
    weights = pkg.members[layout.WEIGHTS]
    click.echo(f"weights:  {len(weights) / 1e6:.2f} MB")
    click.echo(f"arena:    {program.arena_bytes / 1e6:.2f} MB at the declared maxima")
    click.echo(f"kernels:  {len({s.kernel for s in program.steps})} distinct, {len(program.steps)} steps")
    for line in _bucket_lines(program.sections.get("cuda")):
        click.echo(line)
    from .verification import verification_table

    for line in verification_table(m.get("verification")):
        click.echo(line)
    for key, value in sorted(m.get("user_metadata", {}).items()):
        click.echo(f"meta:     {key}={value}")


@main.command()
@click.argument("package", type=click.Path(exists=True, dir_okay=False))
@click.option("--signature", type=click.Path(exists=True, dir_okay=False),
              help="An OpenSSF Model Signing signature (from `aotpack sign`) to check too.")
@click.option("--public-key", type=click.Path(exists=True, dir_okay=False),
              help="The signer's public key (PEM) for --signature.")
@click.option("--certificate-chain", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="For a certificate signature: the chain to trust (repeatable) instead of --public-key.")
def verify(package: str, signature: str | None, public_key: str | None, certificate_chain: tuple[str, ...]) -> None:
    """Check every member of PACKAGE against the sha256 digests in its manifest (and a signature)."""
    from .packages.reader import read_package, verify_digests

    if signature is None and (public_key or certificate_chain):
        _fail("--public-key and --certificate-chain need --signature")
    if signature is not None and not (public_key or certificate_chain):
        _fail("--signature needs --public-key (or --certificate-chain for a certificate signature)")
    if signature is not None:
        # First, so that a tampered member is reported as changed since signing, by name.
        from .packages.signing import verify_signature

        digest = verify_signature(package, signature, public_key=public_key, certificate_chain=certificate_chain)
        click.echo(f"{package}: signature {signature} verifies (every member and the container checked); "
                   f"it covers package digest {digest}")
        return
    pkg = read_package(package)
    problems = verify_digests(pkg)
    if problems:
        _fail(f"{package}: " + "; ".join(problems))
    click.echo(f"{package}: {len(pkg.members)} members match their digests; package digest {pkg.digest}")


from . import cli_registry  # sign, diff, refit, publish: registered on `main` here, below the core commands

cli_registry.register(main)

if __name__ == "__main__":
    main()
