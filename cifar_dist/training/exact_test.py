"""The final test's exact scores: loss and accuracy over the whole test set, equal to a single-rank run's.

Every rank scores its own slice of the test set (the engine says which:
``engine.exact_test_slice``); the ranks' sums, not their means, are combined
in one collective, so uneven slices weigh right. ``recipe.final_test`` calls
it, once plain and once per TTA view.
"""

from __future__ import annotations

from typing import Dict, List


def evaluate_exact(model, stream, engine, outputs=("",)) -> List[Dict[str, float]]:
    """Test loss/accuracy over the whole test set, equal to a single-rank run, for each of the
    model's ``outputs`` (the prefixes of their metric names; "" for a one-output model).

    Every rank evaluates its own slice (all ranks together cover each image
    once); sums, not means, are combined, so uneven slices weigh right.
    """
    logs = engine.evaluate(model, stream, outputs) if stream.samples else {}  # ENGINE: Keras' or the device's
    # Keras reports a float32 mean; the count of correct images behind it is
    # exact after rounding, so the combined accuracy is an exact fraction.
    mine = [
        (
            float(logs.get(f"{o}loss", 0.0)) * stream.samples,
            round(float(logs.get(f"{o}accuracy", 0.0) * stream.samples)),
        )
        for o in outputs
    ]
    # ENGINE: one collective for the numbers of every rank; ranks that scored the same slice count once
    # (JAX: every process scores all of it, and its numbers are the whole job's).
    parts = list(dict(engine.allgather_object((engine.exact_test_slice(), (mine, stream.samples)))).values())
    total = sum(p[1] for p in parts)
    results = []
    for i in range(len(outputs)):
        correct = sum(p[0][i][1] for p in parts)
        results.append(
            {
                "loss": sum(p[0][i][0] for p in parts) / total,
                "accuracy": correct / total,
                "correct": int(correct),
                "samples": int(total),
            }
        )
    return results
