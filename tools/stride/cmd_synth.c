/* placeholder until the synth module lands */
#include "commands.h"
int st_cmd_synth(int argc, char **argv) { (void)argc; (void)argv; return 1; }
