"""Our own code generators: FX graph -> loop IR -> fused C++ (cpp_pipeline) or Triton
(triton_pipeline) kernels."""
