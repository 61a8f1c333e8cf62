"""The rank's device: which GPU it takes and whether it is the one the run asked for, and a
training step replayed from CUDA graphs (with a CPU stand-in that replays like a graph).
"""
