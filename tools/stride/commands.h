/* stride command-line tool: one function per subcommand, each in cmd_<name>.c.
 * Each returns the process exit status: 0 success, 1 failure, 2 bad usage. */
#ifndef STRIDE_TOOL_COMMANDS_H
#define STRIDE_TOOL_COMMANDS_H

int st_cmd_synth(int argc, char **argv);
int st_cmd_inspect(int argc, char **argv);
int st_cmd_run(int argc, char **argv);
int st_cmd_perplexity(int argc, char **argv);
int st_cmd_tokenize(int argc, char **argv);
int st_cmd_bench(int argc, char **argv);
int st_cmd_calibrate(int argc, char **argv);
int st_cmd_serve(int argc, char **argv);
int st_cmd_chat(int argc, char **argv);

#endif
