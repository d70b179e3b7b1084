import torch


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)
        self.drop = torch.nn.Dropout(0.5)  # must be off in the export (eval mode)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


def model():
    torch.manual_seed(0)
    return MLP()


example_inputs = torch.randn(2, 8)  # a single tensor: wrapped into a tuple
