/* placeholder, replaced by the real CLI */
#include "normgrad.h"
#include <stdio.h>
int main(void) { printf("%s\n", ng_version_string()); return 0; }
