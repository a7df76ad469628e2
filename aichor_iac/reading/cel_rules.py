"""The CEL rules of the CRDs in crds/ that a create can break, compiled to Python
on cel.py's operations (made by scripts/cel_compile.py from the rules' text: do not edit)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import cel


def _rule_0(v_self: Any) -> Any:
    # !((has(self.onSuccess) || has(self.onFailure)) && has(self.deletionRules))
    return cel.not_(
        cel.and_(
            cel.or_(cel.has(v_self, "onSuccess"), cel.has(v_self, "onFailure")),
            cel.has(v_self, "deletionRules"),
        )
    )


def _rule_1(v_self: Any) -> Any:
    # !(has(self.jobStatus) && has(self.jobDeploymentStatus))
    return cel.not_(cel.and_(cel.has(v_self, "jobStatus"), cel.has(v_self, "jobDeploymentStatus")))


def _rule_2(v_self: Any) -> Any:
    # !(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && self.replicatedJobs.exists(x, has(x.dependsOn)))
    return cel.not_(
        cel.and_(
            cel.and_(
                cel.has(v_self, "startupPolicy"),
                cel.compare(
                    "==",
                    "relation_eq",
                    cel.field(cel.field(v_self, "startupPolicy"), "startupPolicyOrder"),
                    "InOrder",
                ),
            ),
            cel.exists(cel.field(v_self, "replicatedJobs"), lambda v_x: cel.has(v_x, "dependsOn")),
        )
    )


def _rule_3(v_self: Any) -> Any:
    # !has(self.name) && !has(self.namespace)
    return cel.and_(cel.not_(cel.has(v_self, "name")), cel.not_(cel.has(v_self, "namespace")))


def _rule_4(v_self: Any) -> Any:
    # !has(self.searchAlgorithm.grid) || self.parameters.all(p, has(p.searchSpace.categorical))
    return cel.or_(
        cel.not_(cel.has(cel.field(v_self, "searchAlgorithm"), "grid")),
        cel.all_(
            cel.field(v_self, "parameters"),
            lambda v_p: cel.has(cel.field(v_p, "searchSpace"), "categorical"),
        ),
    )


def _rule_5(v_self: Any) -> Any:
    # !self.exists(c, c == 'node')
    return cel.not_(cel.exists(v_self, lambda v_c: cel.compare("==", "relation_eq", v_c, "node")))


def _rule_6(v_self: Any) -> Any:
    # ((has(self.onSuccess) && has(self.onFailure)) || has(self.deletionRules))
    return cel.or_(
        cel.and_(cel.has(v_self, "onSuccess"), cel.has(v_self, "onFailure")),
        cel.has(v_self, "deletionRules"),
    )


def _rule_7(v_self: Any) -> Any:
    # [has(self.random),has(self.grid)].filter(x,x==true).size() == 1
    return cel.compare(
        "==",
        "relation_eq",
        cel.size(
            cel.filter_(
                [cel.has(v_self, "random"), cel.has(v_self, "grid")],
                lambda v_x: cel.compare("==", "relation_eq", v_x, True),
            )
        ),
        1,
    )


def _rule_8(v_self: Any) -> Any:
    # [has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)].filter(x, x).size() <= 1
    return cel.compare(
        "<=",
        "relation_le",
        cel.size(
            cel.filter_(
                [
                    cel.has(v_self, "torch"),
                    cel.has(v_self, "mpi"),
                    cel.has(v_self, "jax"),
                    cel.has(v_self, "xgboost"),
                    cel.has(v_self, "flux"),
                ],
                lambda v_x: v_x,
            )
        ),
        1,
    )


def _rule_9(v_self: Any) -> Any:
    # [has(self.uniform),has(self.logUniform),has(self.categorical)].filter(x,x==true).size() == 1
    return cel.compare(
        "==",
        "relation_eq",
        cel.size(
            cel.filter_(
                [
                    cel.has(v_self, "uniform"),
                    cel.has(v_self, "logUniform"),
                    cel.has(v_self, "categorical"),
                ],
                lambda v_x: cel.compare("==", "relation_eq", v_x, True),
            )
        ),
        1,
    )


def _rule_10(v_self: Any) -> Any:
    # double(self.min) < double(self.max)
    return cel.compare(
        "<",
        "relation_lt",
        cel.double(cel.field(v_self, "min")),
        cel.double(cel.field(v_self, "max")),
    )


def _rule_11(v_self: Any) -> Any:
    # double(self.min) > 0.0
    return cel.compare(">", "relation_gt", cel.double(cel.field(v_self, "min")), 0.0)


def _rule_12(v_self: Any) -> Any:
    # has(self.jobStatus) || has(self.jobDeploymentStatus)
    return cel.or_(cel.has(v_self, "jobStatus"), cel.has(v_self, "jobDeploymentStatus"))


def _rule_13(v_self: Any) -> Any:
    # self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')
    return cel.or_(
        cel.compare("==", "relation_eq", v_self, ""),
        cel.matches(v_self, "^[A-Za-z][A-Za-z0-9+.-]*://.+$"),
    )


def _rule_14(v_self: Any) -> Any:
    # self >= 1
    return cel.compare(">=", "relation_ge", v_self, 1)


def _rule_15(v_self: Any) -> Any:
    # self in ['ray.io/kuberay-operator', 'kueue.x-k8s.io/multikueue']
    return cel.in_(v_self, ["ray.io/kuberay-operator", "kueue.x-k8s.io/multikueue"])


def _rule_16(v_self: Any) -> Any:
    # self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']
    return cel.in_(
        v_self, ["trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue"]
    )


def _rule_17(v_self: Any) -> Any:
    # self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')
    return cel.matches(
        cel.field(cel.field(v_self, "metadata"), "name"), "^[a-z]([-a-z0-9]*[a-z0-9])?$"
    )


def _rule_18(v_self: Any) -> Any:
    # self.parallelTrials <= self.numTrials
    return cel.compare(
        "<=", "relation_le", cel.field(v_self, "parallelTrials"), cel.field(v_self, "numTrials")
    )


def _rule_19(v_self: Any) -> Any:
    # self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)
    return cel.all_(
        cel.field(v_self, "templates"),
        lambda v_t: cel.or_(
            cel.not_(cel.has(cel.field(v_t, "metadata"), "namespace")),
            cel.compare(
                "==", "relation_eq", cel.size(cel.field(cel.field(v_t, "metadata"), "namespace")), 0
            ),
        ),
    )


def _rule_20(v_self: Any) -> Any:
    # size(self.metadata.name) <= 63
    return cel.compare(
        "<=", "relation_le", cel.size(cel.field(cel.field(v_self, "metadata"), "name")), 63
    )


# rule's text -> its function of `self`
RULES: dict[str, Callable[[Any], Any]] = {
    "!((has(self.onSuccess) || has(self.onFailure)) && has(self.deletionRules))": _rule_0,
    "!(has(self.jobStatus) && has(self.jobDeploymentStatus))": _rule_1,
    "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && self.replicatedJobs.exists(x, has(x.dependsOn)))": _rule_2,
    "!has(self.name) && !has(self.namespace)": _rule_3,
    "!has(self.searchAlgorithm.grid) || self.parameters.all(p, has(p.searchSpace.categorical))": _rule_4,
    "!self.exists(c, c == 'node')": _rule_5,
    "((has(self.onSuccess) && has(self.onFailure)) || has(self.deletionRules))": _rule_6,
    "[has(self.random),has(self.grid)].filter(x,x==true).size() == 1": _rule_7,
    "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)].filter(x, x).size() <= 1": _rule_8,
    "[has(self.uniform),has(self.logUniform),has(self.categorical)].filter(x,x==true).size() == 1": _rule_9,
    "double(self.min) < double(self.max)": _rule_10,
    "double(self.min) > 0.0": _rule_11,
    "has(self.jobStatus) || has(self.jobDeploymentStatus)": _rule_12,
    "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')": _rule_13,
    "self >= 1": _rule_14,
    "self in ['ray.io/kuberay-operator', 'kueue.x-k8s.io/multikueue']": _rule_15,
    "self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']": _rule_16,
    "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')": _rule_17,
    "self.parallelTrials <= self.numTrials": _rule_18,
    "self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)": _rule_19,
    "size(self.metadata.name) <= 63": _rule_20,
}
