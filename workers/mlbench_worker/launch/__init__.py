"""How a rank process comes to be and finds its peers: the rendezvous of each launcher (torchrun,
an Indexed Job, Slurm's ``srun``, ``mpiexec``), the warm-start fork server and the forked rank
group it launches, joining the emulated node's network namespace, and the host allocator set up
before training.
"""
