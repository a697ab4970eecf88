"""A Python-heavy CPU training loop, for the capture overhead benchmark (bench/capture.py --program heavy).

The Dataset's ``__getitem__`` builds every sample element by element in Python (as slow hand-written
augmentation code does), so most of a step is Python function calls, not ops: the case where tracing every
Python call (``with_stack``) costs the most. The model is a small MLP written here (no torchvision).

    python bench/python_heavy.py --steps 8
    opscope record -- python bench/python_heavy.py --steps 8
"""

import argparse
import math

import torch
from torch.utils.data import DataLoader, Dataset


def _jitter(value: float, i: int) -> float:
    return value + 0.01 * math.sin(i)


class SlowDataset(Dataset):
    """Samples made in Python: a call per element, like per-pixel augmentation code."""

    def __init__(self, size: int, features: int) -> None:
        self.size, self.features = size, features

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        values = [_jitter(((index * 31 + j * 7) % 97) / 97.0, j) for j in range(self.features)]
        return torch.tensor(values), index % 10


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--batch", type=int, default=128)
parser.add_argument("--features", type=int, default=1024)
args = parser.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(args.features, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.CrossEntropyLoss()
loader = DataLoader(SlowDataset(args.steps * args.batch, args.features), batch_size=args.batch)
for x, y in loader:
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
print(f"final loss {loss.item():.4f}")
