"""What both Keras' SGDW share (``sgdw.py`` for Keras 2, ``keras3_optimizers.py`` for Keras 3), importing neither.

The arguments, which variable decays and its lr factor (by the variable's
name: ``var.name`` in Keras 2, ``"batch_normalization/beta:0"``; ``var.path``
in Keras 3, ``"batch_normalization/beta"``), and their config.
"""

from __future__ import annotations


class DecoupledDecay:
    """SGDW's own arguments, for an optimizer class of either Keras (a mixin)."""

    def _init_decay(self, weight_decay, exclude_from_weight_decay, lr_multipliers) -> None:
        self.decoupled_weight_decay = float(weight_decay)
        self.decay_exclusions = list(exclude_from_weight_decay or [])
        self.lr_multipliers = {str(k): float(v) for k, v in dict(lr_multipliers or {}).items()}

    def decays_name(self, name: str) -> bool:
        return self.decoupled_weight_decay > 0 and not any(part in name for part in self.decay_exclusions)

    def lr_multiplier_of(self, name: str) -> float:
        """The product of the factors whose substring is in the variable's name (1 when none)."""
        factor = 1.0
        for part, value in self.lr_multipliers.items():
            if part in name:
                factor *= value
        return factor

    def decay_config(self) -> dict:
        return {
            "weight_decay": self.decoupled_weight_decay,
            "exclude_from_weight_decay": list(self.decay_exclusions),
            "lr_multipliers": dict(self.lr_multipliers),
        }
