"""The plugins that ship with attnx: linear attention, Based (linear attention with a Taylor feature map)
and sliding-window attention, the mixers BaseConv (a gated convolution), RetNet's retention and GLA
(decayed linear attention), local attention, a Gaussian score, and the relative position scores ALiBi,
T5's bias and RoPE.

Each module is one plugin written only against attnx's public plugin API, as a user's own would be, so
that it reads as a complete one-file example. They are not imported here: each is registered through
attnx's own `attnx.plugins` entry points (pyproject.toml), which `attnx.registry.load_all` loads like
any installed package's.
"""
