"""Cluster commands: ``cluster create|add|delete|list|use|init``.

Thin: parse, build a ``ClusterRequest``, show the cost estimate and ask, call the provider from
``mlbench_tui.clusters.providers``' registry, print. Progress goes to stderr; stdout carries only
the requested output (the context name, the cluster table). Only argparse and the stdlib at
module level (``mlbench --help`` stays fast).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

from mlbench_tui.commands.confirm import confirm
from mlbench_tui.commands.usage import documented

CLOUD_DEFAULT_GPU = "1xT4"
DEFAULT_NAMESPACE = "mlbench"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``cluster`` command group to the ``mlbench`` parser."""
    group = sub.add_parser(
        "cluster",
        help="create, delete, list and switch between benchmark clusters (GKE, EKS, KIND)",
        description="Provision Kubernetes clusters for benchmarks: GKE and EKS GPU clusters through "
        "Pulumi (one stack per cluster), KIND clusters locally.",
        **documented("cluster"),
    )
    group.set_defaults(handler=lambda _args: _usage(group))
    cmds = group.add_subparsers(dest="cluster_command", metavar="SUBCOMMAND")

    p = cmds.add_parser(
        "create",
        help="create a cluster and make it the current kubeconfig context",
        description="Create a cluster with a small system pool and a benchmark pool (GPU nodes are tainted "
        "mlbench.io/gpu=true:NoSchedule so only benchmark pods land there), write a kubeconfig context "
        "mlbench-PROVIDER-NAME, then install the in-cluster server. Cloud clusters show an hourly cost "
        "estimate and ask for confirmation first. Re-running resumes an interrupted create.",
        **documented("cluster create"),
    )
    p.add_argument("provider", metavar="PROVIDER", help="gcp, aws or kind")
    p.add_argument("name", metavar="NAME", help="cluster name (lowercase letters, digits, '-')")
    p.add_argument(
        "--nodes",
        "--workers",
        dest="nodes",
        type=int,
        default=1,
        metavar="N",
        help="benchmark pool nodes; for kind, worker nodes (default 1)",
    )
    p.add_argument(
        "--gpu",
        metavar="NxMODEL",
        help=f"GPUs per node, e.g. 1xT4 or 4xA100; 'none' for CPU nodes (default {CLOUD_DEFAULT_GPU})",
    )
    p.add_argument("--machine-type", metavar="TYPE", help="machine/instance type (default: picked for --gpu)")
    p.add_argument("--spot", action="store_true", help="use spot/preemptible benchmark nodes")
    p.add_argument("--region", help="cloud region (GCP: a regional cluster)")
    p.add_argument("--zone", help="zone of the benchmark nodes (GCP default us-central1-a)")
    p.add_argument("--project", help="GCP project (default: gcloud's configured project)")
    p.add_argument("--min-nodes", type=int, metavar="N", help="autoscaling minimum (default --nodes)")
    p.add_argument("--max-nodes", type=int, metavar="N", help="autoscaling maximum (default --nodes)")
    p.add_argument("--disk-gb", type=int, default=100, metavar="GB", help="boot disk per node (default 100)")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--no-init", action="store_true", help="do not install the in-cluster server")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="namespace for the in-cluster server")
    p.set_defaults(handler=cmd_create)

    p = cmds.add_parser(
        "add",
        help="record an existing Slurm cluster (partition, shared directory, server URL)",
        description="Record how to use an existing Slurm cluster from this login node, so a spec can say "
        "target: {kind: slurm, cluster: NAME}. Nothing is provisioned; adding NAME again updates it.",
        **documented("cluster add"),
    )
    p.add_argument("provider", metavar="PROVIDER", choices=("slurm",), help="slurm")
    p.add_argument("name", metavar="NAME", help="cluster name (lowercase letters, digits, '-')")
    p.add_argument("--partition", help="default partition (a spec's target.partition wins)")
    p.add_argument("--account", help="default account")
    p.add_argument("--qos", help="default quality of service")
    p.add_argument(
        "--workdir",
        metavar="DIR",
        help="directory on the shared filesystem for run files and per-rank logs "
        "(default: mlbench's runs directory, which must then be shared)",
    )
    p.add_argument(
        "--server-url",
        metavar="URL",
        help="metrics server URL as the compute nodes see it (default: this host's address when "
        "`mlbench server --host 0.0.0.0` runs, else the local URL)",
    )
    p.add_argument("--conf", metavar="FILE", help="slurm.conf for the client tools (SLURM_CONF)")
    p.add_argument("--python", metavar="PATH", help="Python on the compute nodes (default: this one)")
    p.add_argument(
        "--gpu-option",
        choices=("gpus-per-task", "gres"),
        default="gpus-per-task",
        help="how to ask for GPUs: --gpus-per-task (default) or --gres=gpu:N per node",
    )
    p.add_argument(
        "--network-prolog",
        action="store_true",
        help="the site installed mlbench's network prolog and epilog on the compute nodes, so runs "
        "with spec.network can shape the nodes' links (see the README); without it they are refused",
    )
    p.set_defaults(handler=cmd_add)

    p = cmds.add_parser(
        "delete",
        help="delete a cluster, its kubeconfig context and its record (slurm: forget the record)",
        **documented("cluster delete"),
    )
    p.add_argument("provider", metavar="PROVIDER", help="gcp, aws, kind or slurm")
    p.add_argument("name", metavar="NAME")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(handler=cmd_delete)

    p = cmds.add_parser("list", help="list the clusters mlbench created", **documented("cluster list"))
    p.add_argument("-o", "--output", choices=("table", "json"), default="table", help="output format")
    p.set_defaults(handler=cmd_list)

    p = cmds.add_parser(
        "use",
        help="make a cluster current: its kubeconfig context, or the default Slurm cluster of specs",
        **documented("cluster use"),
    )
    p.add_argument("name", metavar="NAME")
    p.add_argument("--provider", help="gcp, aws, kind or slurm (when several clusters share NAME)")
    p.set_defaults(handler=cmd_use)

    p = cmds.add_parser(
        "init",
        help="install the in-cluster mlbench server (and optionally the NVIDIA device plugin)",
        **documented("cluster init"),
    )
    p.add_argument("--context", help="kubeconfig context (default: the current one)")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, help=f"namespace (default {DEFAULT_NAMESPACE})")
    p.add_argument(
        "--device-plugin",
        action="store_true",
        help="also deploy the NVIDIA device plugin DaemonSet (EKS GPU nodes need it; GKE runs its own)",
    )
    p.set_defaults(handler=cmd_init)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def _progress(line: str) -> None:
    print(line.rstrip("\n"), file=sys.stderr, flush=True)


def cmd_create(args: argparse.Namespace) -> int:
    from mlbench_tui.clusters import prices
    from mlbench_tui.clusters.providers import ClusterRequest, Preflight, load_provider, parse_gpu
    from mlbench_tui.errors import InfraError

    gpu_text = (
        args.gpu if args.gpu is not None else (CLOUD_DEFAULT_GPU if args.provider in ("gcp", "aws") else None)
    )
    gpu = None if gpu_text is None or gpu_text.lower() == "none" else parse_gpu(gpu_text)
    request = ClusterRequest(
        provider=args.provider,
        name=args.name,
        nodes=args.nodes,
        gpu=gpu,
        machine_type=args.machine_type,
        spot=args.spot,
        region=args.region,
        zone=args.zone,
        project=args.project,
        min_nodes=args.min_nodes,
        max_nodes=args.max_nodes,
        disk_gb=args.disk_gb,
    )
    shape = None
    if request.provider in prices.PRICED_PROVIDERS:
        shape = prices.resolve_shape(request.provider, request.gpu, request.machine_type)  # bad input first
    provider = load_provider(request.provider)
    if isinstance(provider, Preflight):
        provider.preflight(request)  # every missing tool/credential before asking for money
    if shape is not None:
        estimate = prices.estimate(request, shape)
        pool = f"{request.nodes} x {shape.machine_type}" + (f" with {request.gpu}" if request.gpu else "")
        print(
            f"{request.provider} cluster {request.name}: {pool}{' (spot)' if request.spot else ''}",
            file=sys.stderr,
        )
        print(estimate.render(), file=sys.stderr)
        if not confirm("Create this cluster?", assume_yes=args.yes, action="create a paid cloud cluster"):
            print("cancelled: nothing was created", file=sys.stderr)
            return 1
    record = provider.create(request, progress=_progress)
    _progress(f"cluster {request.name} is up; kubeconfig context {record.context} is now current")
    if not args.no_init:
        try:
            _install_server(record.context, args.namespace, required=False)
        except InfraError as exc:
            raise InfraError(
                f"the cluster is up, but installing the in-cluster server failed: {exc.message}",
                hint=f"retry with `mlbench cluster init --context {record.context}`",
            ) from None
    print(record.context)
    return 0


def _install_server(context: str | None, namespace: str, *, required: bool) -> None:
    from mlbench_tui.clusters.providers import load_incluster_installer
    from mlbench_tui.errors import InfraError

    installer = load_incluster_installer()
    if installer is None:
        message = "the in-cluster server installer is not part of this installation"
        if required:
            raise InfraError(message)
        _progress(f"note: {message}; skipped (run `mlbench cluster init` once it is available)")
        return
    _progress(f"installing the in-cluster server in namespace {namespace}")
    installer(context, namespace)


def cmd_add(args: argparse.Namespace) -> int:
    from mlbench_tui.clusters.slurm import SlurmProvider
    from mlbench_tui.executors.slurm.cluster import SlurmCluster

    cluster = SlurmCluster(
        name=args.name,
        partition=args.partition,
        account=args.account,
        qos=args.qos,
        workdir=args.workdir,
        server_url=args.server_url,
        conf=args.conf,
        python=args.python,
        gpu_option=args.gpu_option,
        network_prolog=args.network_prolog,
    )
    record = SlurmProvider().add(cluster)
    if not args.server_url:
        _progress(
            "note: workers report to this host's metrics server; compute nodes other than this host reach "
            "it only if it listens beyond loopback (`mlbench server --host 0.0.0.0`) or with --server-url"
        )
    _progress(
        f"recorded Slurm cluster {args.name}; use it with target: {{kind: slurm, cluster: {args.name}}}"
    )
    print(record.context)
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    from mlbench_tui.clusters.providers import load_provider

    provider = load_provider(args.provider)
    if args.provider == "slurm":  # only a record to forget: nothing to confirm
        provider.delete(args.name, progress=_progress)
        return 0
    check = getattr(provider, "check_delete", None)
    if callable(check):
        check(args.name)  # missing tools/credentials before asking
    question = f"Delete {args.provider} cluster {args.name} and everything in it?"
    if not confirm(question, assume_yes=args.yes, action="delete a cluster"):
        print("cancelled: nothing was deleted", file=sys.stderr)
        return 1
    provider.delete(args.name, progress=_progress)
    _progress(f"cluster {args.name} deleted")
    return 0


def _all_records() -> list[Any]:
    """Clusters of every available provider; unavailable providers are skipped with a note."""
    from mlbench_tui.clusters.providers import PROVIDERS, load_provider
    from mlbench_tui.errors import InfraError

    records = []
    for name in PROVIDERS:
        try:
            records.extend(load_provider(name).list())
        except InfraError as exc:
            if name not in ("kind",):
                _progress(f"warning: cannot list {name} clusters: {exc.message}")
    return records


def cmd_list(args: argparse.Namespace) -> int:
    records = _all_records()
    if args.output == "json":
        print(json.dumps([r.to_json() for r in records], indent=2, sort_keys=True))
        return 0
    if not records:
        _progress(
            "no clusters; create one with `mlbench cluster create gcp|aws|kind NAME` "
            "or record a Slurm cluster with `mlbench cluster add slurm NAME`"
        )
        return 0
    from mlbench_tui.clusters import kubeconfig
    from mlbench_tui.clusters.slurm import SlurmProvider
    from mlbench_tui.commands.spec import render_table

    current = {SlurmProvider().current_context()}
    with contextlib.suppress(Exception):  # a broken kubeconfig must not hide the list
        current.add(kubeconfig.current_context())
    header = ("", "NAME", "PROVIDER", "STATUS", "LOCATION", "NODES", "GPU", "MACHINE", "SPOT", "CONTEXT")
    rows = []
    for r in records:
        location = r.zone or r.region or "-"
        rows.append(
            (
                "*" if r.context in current else "",
                r.name,
                r.provider,
                r.status,
                location,
                str(r.nodes if r.nodes is not None else "-"),
                r.gpu or "-",
                r.machine_type or "-",
                "yes" if r.spot else "no",
                r.context,
            )
        )
    sys.stdout.write(render_table(header, rows))
    return 0


def cmd_use(args: argparse.Namespace) -> int:
    from mlbench_tui.clusters.providers import load_provider
    from mlbench_tui.errors import InfraError

    matches = [r for r in _all_records() if r.name == args.name and args.provider in (None, r.provider)]
    if not matches:
        raise InfraError(f"no cluster named {args.name!r}", hint="see `mlbench cluster list`")
    if len(matches) > 1:
        providers = ", ".join(sorted(r.provider for r in matches))
        raise InfraError(f"several clusters are named {args.name!r} ({providers})", hint="pass --provider")
    context = load_provider(matches[0].provider).use(args.name)
    print(context)
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    if args.device_plugin:
        from mlbench_tui.clusters import device_plugin

        _progress("deploying the NVIDIA device plugin DaemonSet")
        device_plugin.apply(args.context)
    _install_server(args.context, args.namespace, required=True)
    _progress(f"mlbench server installed in namespace {args.namespace}")
    return 0
