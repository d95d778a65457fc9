#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "sr_data.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int c, char **v){
  sr_data d; if (sr_data_open(&d, v[1], 256, NULL)) { printf("%s\n", sr_errmsg()); return 1; }
  int G=512, T=64; static int32_t in[512*64], tg[512*64];
  long step = atol(v[2]);
  double t0=now(); sr_data_batch(&d, step, G, T, 0, G, in, tg); double t1=now();
  sr_data_batch(&d, step+1, G, T, 0, G, in, tg); double t2=now();
  printf("%s: seek to step %ld (%ld sequences): %.3f s; the next step's batch: %.3f ms\n", v[1], step, step*G, t1-t0, (t2-t1)*1e3);
  return 0; }
