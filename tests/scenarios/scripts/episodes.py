"""Policy gradient by episodes, no DataLoader (the shape of pytorch/examples' reinforce.py).

Each episode runs ``--length`` batch-1 forwards of a 4-128-2 policy (one per environment
step), then one ``backward()`` of the episode's loss and one ``Adam.step``.
"""

import argparse

import torch
from torch import nn

torch.set_num_threads(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=60)
    parser.add_argument("--length", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    policy = nn.Sequential(nn.Linear(4, 128), nn.ReLU(), nn.Linear(128, 2))
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    for _ in range(args.episodes):
        state = torch.zeros(1, 4)
        log_probs = []
        for _ in range(args.length):
            probs = torch.softmax(policy(state), dim=1)
            action = torch.multinomial(probs, 1)
            log_probs.append(torch.log(probs.gather(1, action)))
            state = torch.randn(1, 4)  # the environment's next state
        returns = torch.linspace(1.0, 0.0, args.length).unsqueeze(1)
        loss = -(torch.cat(log_probs) * returns).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
