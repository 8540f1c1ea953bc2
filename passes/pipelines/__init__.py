"""Every pass schedule, one module per pipeline, each a named, numbered sequence of passes run through the
pass manager (``pass_manager.py``): ``lint`` (a target's module and compiled facts to its report, with the
refused-compile variant), ``check`` (compiled HLO alone), ``propagate`` (our propagation, its predictions and
Shardy's agreement), ``suggest`` (rules, graph, problem, solve, refine). The analyzer reaches the analyses
through these and the models."""
