"""The Slurm backend: a run as one batch job (``sbatch``), its state from ``squeue``/``sacct``
(``state``), on a cluster recorded by ``mlbench cluster add slurm`` (``cluster``)."""
