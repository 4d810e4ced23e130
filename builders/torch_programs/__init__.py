"""Stage 3: the torch_gpu programs (torch.export, FP16) built on the GPU host."""
