"""``make bench-gpu``: the GPU config set against in-process PyTorch and the servers users run
instead."""
