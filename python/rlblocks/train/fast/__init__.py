"""The trainer's fast paths, behind one door.

Everything here computes what the plain path computes, faster on CPU for the small models
PPO trains, and each piece declines (None, False or a reason) where it does not cover the
case, so the caller falls back to the plain path:

* :class:`FCActor`: the policy's actor for the default fully connected model: rollout
  actions in numpy, inference as plain tensors (instead of torch modules);
* :class:`FCBackprop`: the PPO loss and its gradients through that model in closed form
  (instead of autograd); it accepts a configuration only when it implements every config
  field that reaches the loss;
* :class:`FlatParameters`: parameters and gradients as views of two flat buffers, so
  Adam and the gradient norm run as one kernel each;
* :func:`make_adam`, :func:`adam_step`, :func:`clip_grad_norm`: the fused Adam kernel and
  the multi-tensor norm called directly (private torch APIs, with public fallbacks);
  :func:`set_learning_rate` for a schedule's steps.

``PPOConfig(fast_paths=False)`` turns all of them off: the policy runs its torch model,
the learner autograd, ``torch.optim.Adam`` and ``clip_grad_norm_``. Nothing in this
package imports the policy or the learner.
"""

from __future__ import annotations

from rlblocks.train.fast.backprop import FCBackprop
from rlblocks.train.fast.fc_actor import FCActor
from rlblocks.train.fast.flat_params import FlatParameters
from rlblocks.train.fast.kernels import adam_step, clip_grad_norm, make_adam, set_learning_rate

__all__ = [
    "FCActor",
    "FCBackprop",
    "FlatParameters",
    "adam_step",
    "clip_grad_norm",
    "make_adam",
    "set_learning_rate",
]
