import torch


class Counter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x):
        self.calls += 1  # MUTATE
        return x + self.calls


model = Counter()
example_inputs = (torch.randn(2, 3),)
