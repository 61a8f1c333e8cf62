"""What the rank reports about the machine it runs on: hardware series sampled off the training
thread (CPU, memory, cgroup limits, GPU through NVML), the environment fingerprint, and the
pre-flight health checks before training.
"""
