"""spec.network on Slurm: a site prolog shapes each node of the job, or the run is refused (pure).

Slurm shapes no links itself. A site that wants the network dimension installs the prolog and
epilog below (``slurm.conf``: ``Prolog=``, ``Epilog=``; slurmd runs them as root on every node of
a job); its cluster record says so (``mlbench cluster add slurm NAME --network-prolog``). A run
with a network then asks for whole nodes (``--exclusive``: the shaping is the node's) and names
its links in the job's comment, ``mlbench-network:rate_bps=N,delay_us=M``; the prolog reads the
comment with ``scontrol``, accepts nothing but those digits, and shapes the node's interface as
the local emulation does (netem delay and a tbf rate on what the node sends; what it receives goes
through an ifb device with the same rate); the epilog removes it. Jobs without that comment are left alone.
"""

from __future__ import annotations

from mlbench_tui.plan import NetworkPlan

COMMENT_PREFIX = "mlbench-network:"


def job_comment(network: NetworkPlan) -> str:
    """The job comment the prolog reads: the rate in bits per second (0: unlimited) and the delay."""
    return f"{COMMENT_PREFIX}rate_bps={network.bandwidth_bps or 0},delay_us={round(network.latency_s * 1e6)}"


def sbatch_options(network: NetworkPlan | None) -> list[str]:
    """What a run with a network adds to its batch script: whole nodes, and its links named."""
    if network is None:
        return []
    return ["--exclusive", f"--comment={job_comment(network)}"]


def refusal(network: NetworkPlan | None, cluster: str, has_prolog: bool) -> str | None:
    """Why a Slurm cluster cannot run ``network`` (None: it can)."""
    if network is None or has_prolog:
        return None
    return (
        f"Slurm cluster {cluster!r} shapes no links: spec.network needs mlbench's network prolog on its "
        "nodes, installed by the site's administrators (see the README: Slurm clusters, the network)"
    )


PROLOG = r"""#!/bin/sh
# mlbench network prolog: shapes this node's link for a job whose comment names its links
# (sbatch --comment=mlbench-network:rate_bps=N,delay_us=M); other jobs are left alone.
# slurm.conf: Prolog=/etc/slurm/mlbench-network-prolog.sh  Epilog=/etc/slurm/mlbench-network-epilog.sh
# The interface is MLBENCH_NETWORK_DEVICE in /etc/mlbench/network.conf, else the one that routes
# to the controller.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
DEVICE=${MLBENCH_NETWORK_DEVICE:-}
[ -r /etc/mlbench/network.conf ] && . /etc/mlbench/network.conf && DEVICE=${MLBENCH_NETWORK_DEVICE:-}
comment=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | tr ' ' '\n' | sed -n 's/^Comment=//p')
case "$comment" in
  mlbench-network:rate_bps=*,delay_us=*) ;;
  *) exit 0 ;;
esac
rate=${comment#mlbench-network:rate_bps=}; rate=${rate%%,*}
delay=${comment##*,delay_us=}
case "$rate" in ''|*[!0-9]*) echo "mlbench network prolog: bad rate in '$comment'" >&2; exit 1 ;; esac
case "$delay" in ''|*[!0-9]*) echo "mlbench network prolog: bad delay in '$comment'" >&2; exit 1 ;; esac
if [ -z "$DEVICE" ]; then
  controller=$(scontrol ping 2>/dev/null | sed -n 's/^Slurmctld(primary) at \([^ ]*\) is UP.*/\1/p')
  DEVICE=$(ip -o route get "$(getent ahostsv4 "$controller" | head -n 1 | cut -d' ' -f1)" 2>/dev/null \
    | sed -n 's/.* dev \([^ ]*\).*/\1/p')
fi
[ -n "$DEVICE" ] || { echo "mlbench network prolog: no interface to shape" >&2; exit 1; }
IFB=mlbench-ifb
tc qdisc del dev "$DEVICE" root 2>/dev/null
tc qdisc del dev "$DEVICE" ingress 2>/dev/null
ip link del "$IFB" 2>/dev/null
parent="root handle 1:"
if [ "$delay" -gt 0 ]; then
  tc qdisc add dev "$DEVICE" root handle 1: netem delay "${delay}us" limit 100000 || exit 1
  parent="parent 1:1 handle 10:"
fi
if [ "$rate" -gt 0 ]; then
  burst=$((rate / 8000)); [ "$burst" -lt 67050 ] && burst=67050
  limit=$((rate / 80)); [ "$limit" -lt 262144 ] && limit=262144
  tc qdisc add dev "$DEVICE" $parent tbf rate "${rate}bit" burst "$burst" limit "$limit" || exit 1
  # what arrives is redirected through an ifb device whose queue has the same rate
  ip link add "$IFB" type ifb || exit 1
  ip link set dev "$IFB" up || exit 1
  tc qdisc add dev "$IFB" root tbf rate "${rate}bit" burst "$burst" limit "$limit" || exit 1
  tc qdisc add dev "$DEVICE" handle ffff: ingress || exit 1
  tc filter add dev "$DEVICE" parent ffff: protocol all u32 match u32 0 0 \
    action mirred egress redirect dev "$IFB" || exit 1
fi
exit 0
"""

EPILOG = r"""#!/bin/sh
# mlbench network epilog: removes what the prolog put on this node's link for the job.
PATH=/usr/sbin:/usr/bin:/sbin:/bin
DEVICE=${MLBENCH_NETWORK_DEVICE:-}
[ -r /etc/mlbench/network.conf ] && . /etc/mlbench/network.conf && DEVICE=${MLBENCH_NETWORK_DEVICE:-}
comment=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null | tr ' ' '\n' | sed -n 's/^Comment=//p')
case "$comment" in mlbench-network:*) ;; *) exit 0 ;; esac
if [ -z "$DEVICE" ]; then
  controller=$(scontrol ping 2>/dev/null | sed -n 's/^Slurmctld(primary) at \([^ ]*\) is UP.*/\1/p')
  DEVICE=$(ip -o route get "$(getent ahostsv4 "$controller" | head -n 1 | cut -d' ' -f1)" 2>/dev/null \
    | sed -n 's/.* dev \([^ ]*\).*/\1/p')
fi
[ -n "$DEVICE" ] || exit 0
tc qdisc del dev "$DEVICE" root 2>/dev/null
tc qdisc del dev "$DEVICE" ingress 2>/dev/null
ip link del mlbench-ifb 2>/dev/null
exit 0
"""
