import torch


class DictOut(torch.nn.Module):
    """Returns a flat dict, as Hugging Face models return a ModelOutput."""

    def forward(self, x):
        return {"logits": x * 2, "hidden_states": x + 1}


model = DictOut()
example_inputs = (torch.randn(2, 3),)
