import torch


class ItemSize(torch.nn.Module):
    def forward(self, x):
        n = int(x[0, 0].item())  # ITEM
        return x[:, :n]


model = ItemSize()
example_inputs = (torch.full((2, 4), 2.0),)
