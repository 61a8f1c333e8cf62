"""GKE and EKS clusters through Pulumi's Automation API: one stack per cluster.

``GcpProvider`` and ``AwsProvider`` implement the ``Provider`` protocol. Each cluster is a stack
(named after the cluster) of project ``mlbench-gcp`` / ``mlbench-aws``, whose program is the
same ``program()`` the thin stacks in ``infra/gcp`` and ``infra/aws`` run, imported from the
``mlbench_infra`` package the wheel ships (``infra/`` in the repository) and executed inline in
this process. State goes to a local file backend under mlbench's state directory unless
``PULUMI_BACKEND_URL`` says otherwise; the passphrase that encrypts the stack's secrets comes
from ``PULUMI_CONFIG_PASSPHRASE(_FILE)`` or is generated once into a 0600 file there, and is
never printed. Pulumi is imported lazily: listing clusters or estimating costs needs none of it.
"""

from __future__ import annotations

import configparser
import datetime
import importlib
import importlib.metadata
import importlib.util
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlbench_tui.cluster_records import (
    ClusterRecord,
    find_record,
    load_records,
    remove_record,
    save_record,
    state_dir,
)
from mlbench_tui.clusters import kubeconfig
from mlbench_tui.clusters.prices import NodeShape, resolve_shape
from mlbench_tui.clusters.providers import (
    ClusterRequest,
    Progress,
    context_name,
)
from mlbench_tui.errors import InfraError

MIN_PULUMI_VERSION = (3, 100, 0)
PULUMI_INSTALL = (
    "install it with `curl -fsSL https://get.pulumi.com | sh` (or `brew install pulumi/tap/pulumi`; "
    "see https://www.pulumi.com/docs/iac/download-install/) and make sure `pulumi` is on PATH"
)
INFRA_EXTRA = "pip install 'mlbench-tui[infra]'"
GCP_DEFAULT_ZONE = "us-central1-a"
AWS_DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True)
class Missing:
    """One prerequisite that is not there, and how to get it."""

    what: str
    how: str

    def render(self) -> str:
        return f"  - {self.what}: {self.how}"


def missing_error(action: str, missing: list[Missing]) -> InfraError:
    """One error listing every missing prerequisite (so users fix them all in one go)."""
    lines = "\n".join(item.render() for item in missing)
    return InfraError(f"cannot {action}; missing:\n{lines}")


# --- prerequisites -------------------------------------------------------------------------


def find_pulumi() -> str | None:
    """The pulumi CLI: on PATH, else where the official installer puts it (~/.pulumi/bin)."""
    found = shutil.which("pulumi")
    if found:
        return found
    default = Path.home() / ".pulumi" / "bin" / "pulumi"
    return str(default) if default.is_file() and os.access(default, os.X_OK) else None


def pulumi_version(binary: str) -> tuple[int, int, int] | None:
    """``pulumi version`` parsed as a tuple, or None when it cannot be run or parsed."""
    try:
        done = subprocess.run([binary, "version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"v?(\d+)\.(\d+)\.(\d+)", done.stdout)
    if done.returncode != 0 or match is None:
        return None
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def check_pulumi(provider: str) -> list[Missing]:
    """The pulumi CLI (recent enough) and the Python SDK packages for ``provider``."""
    missing = []
    binary = find_pulumi()
    if binary is None:
        missing.append(Missing("the pulumi CLI (not found on PATH)", PULUMI_INSTALL))
    else:
        version = pulumi_version(binary)
        if version is None:
            missing.append(Missing(f"a working pulumi CLI ({binary} version failed)", PULUMI_INSTALL))
        elif version < MIN_PULUMI_VERSION:
            wanted = ".".join(map(str, MIN_PULUMI_VERSION))
            have = ".".join(map(str, version))
            missing.append(
                Missing(f"pulumi CLI >= {wanted} (found {have})", "upgrade with `pulumi self-update`")
            )
    package = {"gcp": "pulumi_gcp", "aws": "pulumi_aws"}[provider]
    for module in ("pulumi", package):
        if importlib.util.find_spec(module) is None:
            missing.append(Missing(f"the Python package {module}", INFRA_EXTRA))
    return missing


def _gcloud_config_dir() -> Path:
    return Path(os.environ.get("CLOUDSDK_CONFIG") or Path.home() / ".config" / "gcloud")


def gcp_project(explicit: str | None = None) -> str | None:
    """The GCP project: explicit, the environment variables Pulumi reads, or gcloud's config."""
    if explicit:
        return explicit
    for var in ("GOOGLE_PROJECT", "GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT"):
        if os.environ.get(var):
            return os.environ[var]
    config_dir = _gcloud_config_dir()
    active = config_dir / "active_config"
    name = active.read_text(encoding="utf-8").strip() if active.is_file() else "default"
    parser = configparser.ConfigParser()
    try:
        parser.read(config_dir / "configurations" / f"config_{name}", encoding="utf-8")
    except configparser.Error:
        return None
    return parser.get("core", "project", fallback=None) or None


def gcp_credentials_found() -> bool:
    """Whether Google credentials Pulumi can use are configured (never reads their contents)."""
    if os.environ.get("GOOGLE_CREDENTIALS") or os.environ.get("GOOGLE_OAUTH_ACCESS_TOKEN"):
        return True
    path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS")
    if path:
        return Path(path).expanduser().is_file()
    return (_gcloud_config_dir() / "application_default_credentials.json").is_file()


def aws_credentials_found() -> bool:
    """Whether AWS credentials are configured: env keys, a profile, web identity, or config files."""
    env = os.environ
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return True
    if env.get("AWS_WEB_IDENTITY_TOKEN_FILE") or env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        return True
    if env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        return True
    files = [
        Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or Path.home() / ".aws" / "credentials"),
        Path(env.get("AWS_CONFIG_FILE") or Path.home() / ".aws" / "config"),
    ]
    return any(path.expanduser().is_file() for path in files)


def aws_region(explicit: str | None = None) -> str:
    """The AWS region: explicit, AWS_REGION / AWS_DEFAULT_REGION, else us-east-1."""
    return (
        explicit or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or AWS_DEFAULT_REGION
    )


def gcp_credentials_missing() -> list[Missing]:
    if gcp_credentials_found():
        return []
    how = (
        "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS "
        "to a service account key file"
    )
    return [Missing("Google Cloud credentials", how)]


def aws_credentials_missing() -> list[Missing]:
    if aws_credentials_found():
        return []
    how = (
        "run `aws configure` (or `aws sso login`), or set AWS_PROFILE or "
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
    )
    return [Missing("AWS credentials", how)]


def check_gcp(request: ClusterRequest) -> list[Missing]:
    missing = check_pulumi("gcp") + gcp_credentials_missing()
    if gcp_project(request.project) is None:
        missing.append(Missing("a GCP project", "pass --project ID or run `gcloud config set project ID`"))
    if shutil.which("gke-gcloud-auth-plugin") is None:
        missing.append(
            Missing(
                "gke-gcloud-auth-plugin (kubectl's GKE login helper)",
                "`gcloud components install gke-gcloud-auth-plugin`",
            )
        )
    return missing


def check_aws(request: ClusterRequest) -> list[Missing]:
    missing = check_pulumi("aws") + aws_credentials_missing()
    if shutil.which("aws") is None:
        missing.append(
            Missing(
                "the AWS CLI v2 (kubectl's EKS login helper: aws eks get-token)",
                "see https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html",
            )
        )
    return missing


# --- workspace -----------------------------------------------------------------------------


def pulumi_state_dir() -> Path:
    return state_dir() / "pulumi"


def backend_url() -> str:
    """PULUMI_BACKEND_URL when set, else a local file backend under mlbench's state dir."""
    url = os.environ.get("PULUMI_BACKEND_URL")
    if url:
        return url
    path = pulumi_state_dir() / "backend"
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve().as_uri()


def passphrase_env(url: str) -> dict[str, str]:
    """Environment that lets Pulumi encrypt stack secrets without prompting (value never printed).

    A user-provided PULUMI_CONFIG_PASSPHRASE(_FILE) wins. With a file backend and none given, a
    random passphrase is generated once into a 0600 file next to the state. Other backends
    (Pulumi Cloud) use their own secrets provider.
    """
    if os.environ.get("PULUMI_CONFIG_PASSPHRASE") is not None or os.environ.get(
        "PULUMI_CONFIG_PASSPHRASE_FILE"
    ):
        return {}
    if not url.startswith("file://"):
        return {}
    path = pulumi_state_dir() / "passphrase"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(secrets.token_urlsafe(32))
    return {"PULUMI_CONFIG_PASSPHRASE_FILE": str(path)}


def workspace_env() -> dict[str, str]:
    url = backend_url()
    return {
        "PULUMI_BACKEND_URL": url,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_SKIP_CONFIRMATIONS": "true",
        **passphrase_env(url),
    }


def _plugin_version(package: str) -> str:
    return "v" + importlib.metadata.version(package)


def _command_error_text(exc: Exception) -> str:
    """The useful tail of a failed pulumi command (Pulumi already masks secret values)."""
    text = str(exc).strip().splitlines()
    tail = [line for line in text if line.strip()][-15:]
    return "\n".join(tail)


# --- providers -----------------------------------------------------------------------------


class PulumiProvider:
    """Shared Automation API flow; subclasses say which program, config and checks."""

    name = ""
    project = ""
    component = ""
    plugin = ""
    package = ""

    # subclass hooks ---------------------------------------------------------------------
    def check(self, request: ClusterRequest) -> list[Missing]:
        raise NotImplementedError

    def cloud_config(self, request: ClusterRequest, shape: NodeShape) -> dict[str, str]:
        """The stack config keys only this cloud's program reads (location, machine, GPU type)."""
        raise NotImplementedError

    def after_create(self, context: str, shape: NodeShape, progress: Progress) -> None:
        """Provider-specific steps once the kubeconfig context exists."""

    def describe(self, request: ClusterRequest) -> dict[str, str | None]:
        raise NotImplementedError

    def credentials_missing(self) -> list[Missing]:
        raise NotImplementedError

    # protocol ---------------------------------------------------------------------------
    def preflight(self, request: ClusterRequest) -> None:
        """Raise one InfraError listing every missing tool, package or credential."""
        missing = self.check(request)
        if missing:
            raise missing_error(f"create a {self.name} cluster", missing)

    def shape(self, request: ClusterRequest) -> NodeShape:
        return resolve_shape(self.name, request.gpu, request.machine_type)

    def stack_config(self, request: ClusterRequest, shape: NodeShape) -> dict[str, str]:
        """The stack's config (Pulumi.yaml): the pool keys every program reads, then the cloud's."""
        return {
            "clusterName": f"mlbench-{request.name}",
            "gpuCount": str(shape.gpu_count),
            "nodes": str(request.nodes),
            "minNodes": str(request.autoscaling_min),
            "maxNodes": str(request.autoscaling_max),
            "spot": "true" if request.spot else "false",
            "diskSizeGb": str(request.disk_gb),
            **self.cloud_config(request, shape),
        }

    def program(self) -> Callable[[], None]:
        """The Pulumi program this provider runs inline: ``mlbench_infra.<component>.program``."""
        module_name = f"mlbench_infra.{self.component}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name not in ("mlbench_infra", module_name):
                raise
            raise InfraError(
                f"the Pulumi program {module_name} is not installed",
                hint="reinstall mlbench-tui (`pip install --force-reinstall 'mlbench-tui[infra]'`); "
                "in a source checkout, `pip install -e '.[infra]'`",
            ) from None
        program: Callable[[], None] = module.program
        return program

    def _stack(self, stack_name: str, *, create: bool) -> Any:
        from pulumi import automation as auto

        program = self.program()
        env = workspace_env()
        opts = auto.LocalWorkspaceOptions(
            env_vars=env,
            project_settings=auto.ProjectSettings(
                name=self.project, runtime="python", backend=auto.ProjectBackend(env["PULUMI_BACKEND_URL"])
            ),
        )
        try:
            if create:
                return auto.create_or_select_stack(
                    stack_name=stack_name, project_name=self.project, program=program, opts=opts
                )
            return auto.select_stack(
                stack_name=stack_name, project_name=self.project, program=program, opts=opts
            )
        except auto.StackNotFoundError:
            return None
        except auto.CommandError as exc:
            raise InfraError(
                f"pulumi could not open stack {stack_name}:\n{_command_error_text(exc)}"
            ) from None

    def create(self, request: ClusterRequest, *, progress: Progress) -> ClusterRecord:
        from pulumi import automation as auto

        self.preflight(request)
        shape = self.shape(request)
        stack = self._stack(request.name, create=True)
        where = self.describe(request)
        record = ClusterRecord(
            provider=self.name,
            name=request.name,
            context=context_name(self.name, request.name),
            nodes=request.nodes,
            gpu=str(request.gpu) if request.gpu else None,
            machine_type=shape.machine_type,
            spot=request.spot,
            created_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            status="creating",
            region=where["region"],
            zone=where["zone"],
            project=where["project"],
        )
        # Recorded before anything is created, so `cluster list` shows (and `cluster delete`
        # finds) a cluster whose creation failed half-way and may still cost money.
        save_record(record)
        try:
            progress(f"installing the {self.plugin} provider plugin {_plugin_version(self.package)} (once)")
            stack.workspace.install_plugin(self.plugin, _plugin_version(self.package))
            stack.set_all_config(
                {key: auto.ConfigValue(value) for key, value in self.stack_config(request, shape).items()}
            )
            progress(f"creating {self.name} cluster {request.name} (this takes 10-20 minutes)")
            result = stack.up(on_output=progress, show_secrets=False, suppress_outputs=True, color="never")
        except auto.ConcurrentUpdateError:
            raise InfraError(
                f"another pulumi operation on cluster {request.name} is running",
                hint="wait for it, or run `pulumi cancel` on that stack",
            ) from None
        except auto.CommandError as exc:
            record.status = "failed"
            save_record(record)
            raise InfraError(
                f"creating {self.name} cluster {request.name} failed:\n{_command_error_text(exc)}",
                hint=f"fix the cause and re-run the same command (it resumes); "
                f"`mlbench cluster delete {self.name} {request.name}` removes what was created",
            ) from None
        outputs = {key: value.value for key, value in result.outputs.items()}
        kubeconfig.merge_context(str(outputs["kubeconfig"]), record.context)
        progress(f"kubeconfig context {record.context} written to {kubeconfig.kubeconfig_path()}")
        record.status = "ready"
        record.details = {"cluster_name": outputs.get("cluster_name"), "node_pool": outputs.get("node_pool")}
        save_record(record)  # before the post steps: the cluster exists even if they fail
        self.after_create(record.context, shape, progress)
        return record

    def check_delete(self, name: str) -> None:
        """What deleting needs (the CLI calls this before asking for confirmation)."""
        missing = check_pulumi(self.name) + self.credentials_missing()
        if missing:
            raise missing_error(f"delete the {self.name} cluster {name}", missing)

    def delete(self, name: str, *, progress: Progress) -> None:
        from pulumi import automation as auto

        self.check_delete(name)
        record = find_record(self.name, name)
        stack = self._stack(name, create=False)
        if stack is None and record is None:
            raise InfraError(f"no {self.name} cluster named {name!r}", hint="see `mlbench cluster list`")
        if stack is not None:
            try:
                progress(f"deleting {self.name} cluster {name} (this takes several minutes)")
                stack.destroy(on_output=progress, color="never", suppress_outputs=True)
                stack.workspace.remove_stack(name)
            except auto.ConcurrentUpdateError:
                raise InfraError(f"another pulumi operation on cluster {name} is running") from None
            except auto.CommandError as exc:
                raise InfraError(
                    f"deleting {self.name} cluster {name} failed:\n{_command_error_text(exc)}",
                    hint="re-run the command; it resumes where it stopped",
                ) from None
        context = record.context if record else context_name(self.name, name)
        if kubeconfig.remove_context(context):
            progress(f"kubeconfig context {context} removed")
        remove_record(self.name, name)

    def list(self) -> list[ClusterRecord]:
        return load_records(self.name)

    def use(self, name: str) -> str:
        record = find_record(self.name, name)
        if record is None:
            raise InfraError(f"no {self.name} cluster named {name!r}", hint="see `mlbench cluster list`")
        kubeconfig.use_context(record.context)
        return record.context


def gcp_location(request: ClusterRequest) -> tuple[str | None, str | None]:
    """(region, zone) config for a GCP request: a zonal us-central1-a cluster by default."""
    if request.region is None and request.zone is None:
        return None, GCP_DEFAULT_ZONE
    return request.region, request.zone


class GcpProvider(PulumiProvider):
    """GKE clusters (``mlbench_infra.gke``)."""

    name = "gcp"
    project = "mlbench-gcp"
    component = "gke"
    plugin = "gcp"
    package = "pulumi_gcp"

    def check(self, request: ClusterRequest) -> list[Missing]:
        return check_gcp(request)

    def credentials_missing(self) -> list[Missing]:
        return gcp_credentials_missing()

    def describe(self, request: ClusterRequest) -> dict[str, str | None]:
        region, zone = gcp_location(request)
        return {"region": region, "zone": zone, "project": gcp_project(request.project)}

    def cloud_config(self, request: ClusterRequest, shape: NodeShape) -> dict[str, str]:
        region, zone = gcp_location(request)
        project = gcp_project(request.project) or ""
        config = {
            "gcp:project": project,
            "project": project,
            "machineType": shape.machine_type,
            "gpuType": shape.accelerator or "none",
        }
        if region:
            config["region"] = region
            config["gcp:region"] = region
        if zone:
            config["zone"] = zone
            config["gcp:zone"] = zone
        return config


class AwsProvider(PulumiProvider):
    """EKS clusters (``mlbench_infra.eks``), plus the NVIDIA device plugin after creation."""

    name = "aws"
    project = "mlbench-aws"
    component = "eks"
    plugin = "aws"
    package = "pulumi_aws"

    def check(self, request: ClusterRequest) -> list[Missing]:
        return check_aws(request)

    def credentials_missing(self) -> list[Missing]:
        return aws_credentials_missing()

    def describe(self, request: ClusterRequest) -> dict[str, str | None]:
        return {"region": aws_region(request.region), "zone": request.zone, "project": None}

    def cloud_config(self, request: ClusterRequest, shape: NodeShape) -> dict[str, str]:
        region = aws_region(request.region)
        config = {
            "aws:region": region,
            "region": region,
            "instanceType": shape.machine_type,
            "gpuType": shape.gpu_model or "none",
        }
        if request.zone:
            config["zone"] = request.zone
        return config

    def after_create(self, context: str, shape: NodeShape, progress: Progress) -> None:
        if shape.gpu_count:
            from mlbench_tui.clusters import device_plugin

            progress("deploying the NVIDIA device plugin DaemonSet (EKS does not run one)")
            device_plugin.apply(context)
