import torch


class RepeatHeads(torch.nn.Module):
    """Grouped-query attention's key/value head repeat (transformers' repeat_kv): expand, then merge two dims."""

    def forward(self, k):  # [batch, kv_heads, seq, head_dim]
        b, h, s, d = k.shape
        return k[:, :, None, :, :].expand(b, h, 2, s, d).reshape(b, h * 2, s, d) * 2


model = RepeatHeads()
example_inputs = (torch.randn(2, 2, 16, 16),)
dynamic_axes = {"k": {2: "seq"}}
dynamic_ranges = {"seq": (1, 2048)}
