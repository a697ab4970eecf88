"""A small CPU training loop (the demo's MobileNetV2-style model), for `opscope record` and the benchmarks.

    opscope record -- python examples/train_demo.py --steps 8
"""

import argparse

import torch

from opscope.capture.demo_model import mobilenet_v2_mini

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--image", type=int, default=64)
args = parser.parse_args()

torch.manual_seed(0)
model = mobilenet_v2_mini()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
x = torch.randn(args.batch, 3, args.image, args.image)
y = torch.randint(0, 10, (args.batch,))
for _ in range(args.steps):
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()
print(f"final loss {loss.item():.4f}")
