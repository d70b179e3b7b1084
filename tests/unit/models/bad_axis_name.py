import torch


class One(torch.nn.Module):
    def forward(self, input_ids, attention_mask):
        return input_ids * attention_mask


model = One()
example_inputs = (torch.randn(2, 5), torch.ones(2, 5))
dynamic_axes = {"inputs_ids": {1: "seq"}}
dynamic_ranges = {"seq": (1, 64)}
