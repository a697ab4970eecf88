"""The hand-built trace of the scope / code view tests: a forward pass with modules and Python frames."""

from __future__ import annotations

from support.tracefiles import x

US = 1000


def py(name: str, ts: float, dur: float, tid=1) -> dict:
    return x(name, ts, dur, cat="python_function", tid=tid)


def hand_trace() -> list[dict]:
    """Thread 1 runs the forward; thread 2 a backward op with no Python around it. Times in us.

    train.py(10): <module> [0, 1000)
      nn.Module: Net_0 [10, 900) > model.py(5): forward [12, 890)
        nn.Module: Linear_0 [20, 300) > linear.py(125): forward > <built-in function linear> [25, 280)
            aten::linear [30, 270) > aten::addmm [40, 260)           -> 240 (20 + 220)
        nn.Module: ReLU_0 [400, 500) > <built-in method relu ... at 0x7f00> [405, 495)
            aten::relu [410, 490)                                    -> 80
        nn.Module: ReLU_0 [520, 580) > <built-in method relu ... at 0x7f99> [522, 578)
            aten::relu [530, 570)                                    -> 40
        nn.Module: Linear_1 [600, 800) > linear.py(125): forward > <built-in function linear> [605, 780)
            aten::linear [610, 770)                                  -> 160
        aten::add [850, 880) directly in model.py(5): forward        -> 30
      aten::sum [950, 990) in <module>, outside Net_0                -> 40
    thread 2: autograd::engine::evaluate_function: AddmmBackward0 [100, 400) -> 300
    """
    return [
        x("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        py("train.py(10): <module>", 0, 1000),
        py("nn.Module: Net_0", 10, 890),
        py("model.py(5): forward", 12, 878),
        py("nn.Module: Linear_0", 20, 280),
        py("torch/nn/modules/linear.py(125): forward", 22, 268),
        py("<built-in function linear>", 25, 255),
        x("aten::linear", 30, 240),
        x("aten::addmm", 40, 220),
        py("nn.Module: ReLU_0", 400, 100),
        py("<built-in method relu of type object at 0x7f00>", 405, 90),
        x("aten::relu", 410, 80),
        py("nn.Module: ReLU_0", 520, 60),
        py("<built-in method relu of type object at 0x7f99>", 522, 56),
        x("aten::relu", 530, 40),
        py("nn.Module: Linear_1", 600, 200),
        py("torch/nn/modules/linear.py(125): forward", 602, 188),
        py("<built-in function linear>", 605, 175),
        x("aten::linear", 610, 160),
        x("aten::add", 850, 30),
        x("aten::sum", 950, 40),
        x("autograd::engine::evaluate_function: AddmmBackward0", 100, 300, tid=2),
    ]
