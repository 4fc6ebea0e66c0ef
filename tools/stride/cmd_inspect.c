/* placeholder */
#include "commands.h"
int st_cmd_inspect(int argc, char **argv) { (void)argc; (void)argv; return 1; }
