/* plan.h: `shardc plan`, what a layout costs (memory, FLOPs, communication,
 * step time) for every rank role; docs/plan.md describes the models. */
#ifndef SHARDC_PLAN_H
#define SHARDC_PLAN_H

/* The whole command: argv[0] is "plan", the rest its flags and the .model
 * file. Loads the file (sema_load), runs drv_front and drv_back per layout,
 * prints the plan (or with --search, every layout of --gpus N ranked) to
 * stdout, diagnostics to stderr. Returns the exit status: 0 with a plan, 1
 * when the file or the layout has errors (or --search finds no layout that
 * fits), 2 on a usage error. Frees the compiler's arena before returning. */
int plan_main(int argc, char **argv);

#endif /* SHARDC_PLAN_H */
