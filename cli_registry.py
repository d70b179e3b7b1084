"""The registry commands of `aotpack`: sign, diff, refit, publish (issue 14; docs/registries.md).

Kept apart from cli.py so the export path and these commands change independently; cli.py adds them
to its group with `register(main)`. Errors are AotpackErrors, which the group prints as one line.
"""

from __future__ import annotations

import json
import sys

import click


def register(group: click.Group) -> None:
    for command in (sign, diff, refit, publish):
        group.add_command(command)


@click.command()
@click.argument("package", type=click.Path(exists=True, dir_okay=False))
@click.option("--key", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Elliptic-curve private key (PEM), e.g. from `openssl ecparam -name prime256v1 -genkey`.")
@click.option("--password", envvar="AOTPACK_SIGNING_KEY_PASSWORD", help="The key's password, if it is encrypted.")
@click.option("--certificate", type=click.Path(exists=True, dir_okay=False),
              help="Sign with this signing certificate (for --key) instead of a bare key.")
@click.option("--certificate-chain", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Certificates chaining --certificate to a root (repeatable).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Signature path (default: PACKAGE.sig).")
def sign(package: str, key: str, password: str | None, certificate: str | None, certificate_chain: tuple[str, ...],
         output: str | None) -> None:
    """Sign PACKAGE in the OpenSSF Model Signing format (a Sigstore bundle over every member)."""
    from .packages.signing import sign_package

    output = output or f"{package}.sig"
    digest = sign_package(package, output, key=key, password=password, certificate=certificate,
                          certificate_chain=certificate_chain)
    click.echo(f"wrote {output}: signs package digest {digest}")


@click.command()
@click.argument("old", type=click.Path(exists=True, dir_okay=False))
@click.argument("new", type=click.Path(exists=True, dir_okay=False))
@click.option("--check-version", is_flag=True,
              help="Exit with status 1 when NEW's version is lower than its changes require.")
@click.option("--json", "as_json", is_flag=True, help="Print the changes and the bump as JSON.")
def diff(old: str, new: str, check_version: bool, as_json: bool) -> None:
    """What changed from OLD to NEW, and the semantic-version bump it implies."""
    from .packages.diff import diff_packages
    from .packages.reader import read_package

    result = diff_packages(read_package(old), read_package(new))
    problem = result.version_problem()
    if as_json:
        click.echo(json.dumps({"old_version": result.old_version, "new_version": result.new_version,
                               "bump": result.bump, "minimum_version": str(result.minimum_version),
                               "version_ok": problem is None,
                               "changes": [c.__dict__ for c in result.changes]}, indent=1))
    else:
        for change in result.changes:
            click.echo(f"{change.bump:>5}  {change.what:<9} {change.text}")
        if not result.changes:
            click.echo("no changes but the version")
        click.echo(f"bump: {result.bump} ({result.old_version} -> {result.new_version}; "
                   f"at least {result.minimum_version} needed)")
    if problem and check_version:
        click.echo(f"error: {problem}", err=True)
        sys.exit(1)


@click.command()
@click.argument("package", type=click.Path(exists=True, dir_okay=False))
@click.option("--weights", "weights", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The new weights (safetensors): the model's state-dict names with --model, else the package's.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="The new package's path.")
@click.option("--model", "model_file", type=click.Path(exists=True, dir_okay=False),
              help="The model.py the package was exported from: lowers the weights as export does and verifies "
                   "the new package against eager PyTorch.")
@click.option("--dtype", "dtype", metavar="DTYPE",
              help="With --model: the --dtype the package was exported with (bf16, fp16), to cast the new weights alike.")
@click.option("--version", "version", help="The new package's version (default: a patch bump).")
def refit(package: str, weights: str, output: str, model_file: str | None, dtype: str | None,
          version: str | None) -> None:
    """New weights into PACKAGE's kernels and plan, written to OUTPUT."""
    from .packages.reader import read_package
    from .refit import refit_package

    if dtype is not None and model_file is None:
        raise click.UsageError("--dtype needs --model (without it the weights are the package's own tensors)")
    manifest = refit_package(package, weights, output, version=version, model_file=model_file, dtype=dtype)
    record = manifest.get("verification")
    ran = [p for p in (record or {}).get("points", []) if "device" in p]
    checked = (f"verified against PyTorch at {len(ran)} point(s)" if record and record.get("passed") and ran
               else "not verified (pass --model model.py to verify against PyTorch)" if record is None
               else "NOT VERIFIED: no target in the package runs on this machine")
    click.echo(f"wrote {output}: {manifest['name']} {manifest['version']}, package digest "
               f"{read_package(output).digest}; {checked}")


@click.command()
@click.argument("package", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "format_name", required=True, type=click.Choice(["mlflow", "oci", "triton"]),
              help="mlflow: an MLflow model directory; oci: an OCI image layout (CNCF ModelPack); "
                   "triton: a Triton Inference Server model repository.")
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="A new or empty folder.")
@click.option("--model-version", "model_version", type=click.IntRange(min=1), default=1, show_default=True,
              help="triton: the repository's integer model version folder.")
@click.option("--tag", "tag", help="oci: the reference tag (default: the package version, '+' spelled '_').")
@click.option("--instance-kind", type=click.Choice(["cpu", "gpu"]),
              help="triton: an instance group of this kind (default: none written, Triton's own choice).")
@click.option("--instances", "instance_count", type=click.IntRange(min=1), default=1, show_default=True,
              help="triton: instances in the group (per GPU for gpu).")
@click.option("--gpus", metavar="ID[,ID...]", help="triton: the GPUs of a gpu instance group (default: all).")
@click.option("--dynamic-batching", is_flag=True,
              help="triton: let the server gather requests into one execution (needs a batch symbol).")
@click.option("--max-queue-delay-us", type=click.IntRange(min=0), default=100, show_default=True,
              help="triton: how long the dynamic batcher may hold a request, in microseconds.")
@click.option("--threads", type=click.IntRange(1, 1024),
              help="triton: CPU threads of each instance's session (default 1).")
@click.option("--no-batching", is_flag=True,
              help="triton: max_batch_size 0 and every dim in dims, even with a batch symbol (rows that are not "
                   "independent).")
def publish(package: str, format_name: str, out: str, model_version: int, tag: str | None, instance_kind: str | None,
            instance_count: int, gpus: str | None, dynamic_batching: bool, max_queue_delay_us: int,
            threads: int | None, no_batching: bool) -> None:
    """Lay PACKAGE out where a registry or server expects it, in folder OUT."""
    from .packages.reader import read_package
    from .publish import publish as publish_package

    options: dict = {}
    ctx = click.get_current_context()
    triton_only = [f"--{name.replace('_', '-')}" for name in ("model_version", "instance_kind", "instances", "gpus",
                                                               "dynamic_batching", "max_queue_delay_us", "threads",
                                                               "no_batching")
                   if ctx.get_parameter_source(name if name != "instances" else "instance_count")
                   == click.core.ParameterSource.COMMANDLINE]
    if format_name != "triton" and triton_only:
        raise click.UsageError(f"{', '.join(triton_only)}: options of --format triton only")
    if format_name == "triton":
        try:
            gpu_ids = tuple(int(g) for g in gpus.split(",")) if gpus else ()
        except ValueError:
            raise click.BadParameter(f"{gpus!r}: expected GPU ids such as 0,1", param_hint="--gpus") from None
        options.update(model_version=model_version, batching=not no_batching, instance_kind=instance_kind,
                       instance_count=instance_count, gpus=gpu_ids, dynamic_batching=dynamic_batching,
                       max_queue_delay_us=max_queue_delay_us, threads=threads)
    elif format_name == "oci" and tag:
        options["tag"] = tag
    publish_package(package, format_name, out, **options)
    click.echo(f"wrote {out}: {format_name} layout of package digest {read_package(package).digest}")
