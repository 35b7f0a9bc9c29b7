"""The native learners, one module per algorithm: :mod:`~rlblocks.train.learners.ppo`
(``PPOLearner``: GAE, the clipped loss, SGD), :mod:`~rlblocks.train.learners.dqn`
(``DQNLearner``) and :mod:`~rlblocks.train.learners.sac` (``SACLearner``).

The closed-form glue they share with the RLlib learners (``clear_unwritten``,
``PolyakUpdate``) lives in :mod:`rlblocks.train.fast`, which never imports a learner.
Nothing is imported here: each trainer imports its own learner.
"""
