/* parser.y: the syntax of the .model language, nothing else.
 * Builds the AST (compiler/shardc.h); names and shapes are checked later.
 * Statements end at a newline or ';'. On a syntax error the parser skips to
 * the end of the statement and goes on, so one run reports several errors.
 */
%define api.pure full
%define api.prefix {sxp_}
%define parse.error detailed
%define parse.lac full
%locations
%param {void *scanner}
%parse-param {Module *mod}

%code requires {
#include "shardc.h"
#define SXP_LTYPE sx_loc
#define SXP_LTYPE_IS_DECLARED 1
}

%code provides {
int sxp_lex(SXP_STYPE *lval, SXP_LTYPE *lloc, void *scanner);
}

%code {
/* the location of a rule is that of its first symbol */
#define YYLLOC_DEFAULT(Cur, Rhs, N)                               \
    do {                                                          \
        if (N) (Cur) = YYRHSLOC(Rhs, 1);                          \
        else { (Cur) = YYRHSLOC(Rhs, 0); (Cur).col = (Cur).last_col + 1; } \
    } while (0)
#define YYLOCATION_PRINT(File, Loc) ((void)0)

static void sxp_error(SXP_LTYPE *loc, void *scanner, Module *mod, const char *msg)
{
    (void)scanner; (void)mod;
    sx_error(loc, "%s", msg);
}

static Node *mk(NodeKind k, const sx_loc *l) { return ast_new(k, l); }
static Node *mkbin(int op, Node *a, Node *b, const sx_loc *l)
{
    Node *n = mk(N_BINOP, l);
    n->op = op; n->lhs = a; n->rhs = b;
    return n;
}
}

%union {
    long long inum;
    double fnum;
    char *str;
    struct Node *node;
    struct Vec *vec;
}

%token <inum> INT "integer"
%token <fnum> FLOAT "number"
%token <str> IDENT "identifier" STRING "string"
%token KW_USE "use" KW_CONFIG "config" KW_PARALLEL "parallel" KW_TRAIN "train"
%token KW_BLOCK "block" KW_MODEL "model" KW_PARAM "param" KW_RETURN "return"
%token KW_REPEAT "repeat"
%token NL "end of line" ARROW "->" DOTDOT ".."

%type <node> item section block formal type dim stmt expr primary call inst annot arg
%type <node> opt_ret pinit
%type <vec> formals formal_list dims dim_list stmts sstmts args arg_list annots
%type <str> path section_kw

%left '+' '-'
%left '*' '/' '%'
%precedence NEG

%destructor { } <*>
%expect 0

%%

file
    : items
    ;

items
    : %empty
    | items NL
    | items ';'
    | items item                 { if ($2) vec_push(&mod->items, $2); }
    | items error NL             { yyerrok; }
    | items error '}'            { yyerrok; }
    ;

item
    : KW_USE STRING              { $$ = mk(N_USE, &@1); $$->name = $2; }
    | section                    { $$ = $1; }
    | block                      { $$ = $1; }
    ;

section_kw
    : KW_CONFIG                  { $$ = "config"; }
    | KW_PARALLEL                { $$ = "parallel"; }
    | KW_TRAIN                   { $$ = "train"; }
    ;

/* config { n_embd = 768 } : constants, one per line; a dotted name
 * (rope_scaling.factor = 8.0) is a member of a nested config.json object */
section
    : section_kw '{' sstmts '}'
        { $$ = mk(N_SECTION, &@1); $$->name = $1; $$->body = *$3; }
    ;

sstmts
    : %empty                     { $$ = sx_alloc(sizeof(Vec)); }
    | sstmts NL                  { $$ = $1; }
    | sstmts ';'                 { $$ = $1; }
    | sstmts path '=' expr       { Node *a = mk(N_ASSIGN, &@2); a->name = $2; a->init = $4;
                                   vec_push($1, a); $$ = $1; }
    | sstmts error NL            { $$ = $1; yyerrok; }
    ;

/* block Linear(x: f32[.., IN], OUT: int) -> f32[.., OUT] { ... } */
block
    : KW_BLOCK IDENT '(' formals ')' opt_ret '{' stmts '}'
        { $$ = mk(N_BLOCK, &@2); $$->name = $2; $$->args = *$4; $$->type = $6; $$->body = *$8; }
    | KW_MODEL IDENT '(' formals ')' opt_ret '{' stmts '}'
        { $$ = mk(N_BLOCK, &@2); $$->name = $2; $$->args = *$4; $$->type = $6; $$->body = *$8;
          $$->is_model = 1; }
    ;

opt_ret
    : %empty                     { $$ = NULL; }
    | ARROW type                 { $$ = $2; }
    ;

formals
    : %empty                     { $$ = sx_alloc(sizeof(Vec)); }
    | formal_list                { $$ = $1; }
    | formal_list ','            { $$ = $1; }
    ;

formal_list
    : formal                     { $$ = sx_alloc(sizeof(Vec)); vec_push($$, $1); }
    | formal_list ',' formal     { vec_push($1, $3); $$ = $1; }
    ;

formal
    : IDENT ':' type             { $$ = mk(N_ARG, &@1); $$->name = $1; $$->type = $3; }
    | IDENT ':' type '=' expr    { $$ = mk(N_ARG, &@1); $$->name = $1; $$->type = $3; $$->init = $5; }
    ;

/* int | float | str | f32[B, T, C] | i32[..] */
type
    : IDENT                      { $$ = mk(N_TYPE, &@1); $$->name = $1; }
    | IDENT '[' dims ']'         { $$ = mk(N_TYPE, &@1); $$->name = $1; $$->args = *$3; $$->ival = TY_TENSOR; }
    ;

dims
    : %empty                     { $$ = sx_alloc(sizeof(Vec)); }
    | dim_list                   { $$ = $1; }
    ;

dim_list
    : dim                        { $$ = sx_alloc(sizeof(Vec)); vec_push($$, $1); }
    | dim_list ',' dim           { vec_push($1, $3); $$ = $1; }
    ;

dim
    : expr                       { $$ = $1; }
    | DOTDOT                     { $$ = mk(N_DOTS, &@1); }
    ;

/* statements of a block body, one per line */
stmts
    : %empty                     { $$ = sx_alloc(sizeof(Vec)); }
    | stmts NL                   { $$ = $1; }
    | stmts ';'                  { $$ = $1; }
    | stmts stmt                 { vec_push($1, $2); $$ = $1; }
    | stmts error NL             { $$ = $1; yyerrok; }
    ;

stmt
    : KW_PARAM IDENT ':' type '=' pinit annots
        { $$ = mk(N_PARAM, &@2); $$->name = $2; $$->type = $4; $$->init = $6; $$->annots = *$7; }
    | IDENT '=' expr             { $$ = mk(N_ASSIGN, &@1); $$->name = $1; $$->init = $3; }
    | KW_RETURN expr             { $$ = mk(N_RETURN, &@1); $$->init = $2; }
    ;

/* initializer: zeros | ones | normal(0.02) */
pinit
    : IDENT                      { $$ = mk(N_NAME, &@1); $$->name = $1; }
    | call                       { $$ = $1; }
    ;

annots
    : %empty                     { $$ = sx_alloc(sizeof(Vec)); }
    | annots annot               { vec_push($1, $2); $$ = $1; }
    ;

/* @column  @row  @vocab  @split(1, tensor)  @recompute  @pipeline */
annot
    : '@' IDENT                  { $$ = mk(N_ANNOT, &@2); $$->name = $2; }
    | '@' IDENT '(' args ')'     { $$ = mk(N_ANNOT, &@2); $$->name = $2; $$->args = *$4; }
    ;

expr
    : expr '+' expr              { $$ = mkbin('+', $1, $3, &@2); }
    | expr '-' expr              { $$ = mkbin('-', $1, $3, &@2); }
    | expr '*' expr              { $$ = mkbin('*', $1, $3, &@2); }
    | expr '/' expr              { $$ = mkbin('/', $1, $3, &@2); }
    | expr '%' expr              { $$ = mkbin('%', $1, $3, &@2); }
    | '-' expr %prec NEG         { $$ = mk(N_NEG, &@1); $$->lhs = $2; }
    | primary                    { $$ = $1; }
    ;

primary
    : INT                        { $$ = mk(N_NUM, &@1); $$->ival = $1; $$->fval = (double)$1; $$->op = 'i'; }
    | FLOAT                      { $$ = mk(N_NUM, &@1); $$->fval = $1; $$->op = 'f'; }
    | STRING                     { $$ = mk(N_STR, &@1); $$->name = $1; }
    | path                       { $$ = mk(N_NAME, &@1); $$->name = $1; }
    | '(' expr ')'               { $$ = $2; }
    | call                       { $$ = $1; }
    | inst                       { $$ = $1; }
    ;

/* a dotted name; it may start with the keyword `model` (Hugging Face's
 * "model.layers.0..." names), which is never followed by '.' elsewhere */
path
    : IDENT                      { $$ = $1; }
    | KW_MODEL '.' IDENT         { $$ = sx_fmt("model.%s", $3); }
    | path '.' IDENT             { $$ = sx_fmt("%s.%s", $1, $3); }
    ;

call
    : IDENT '(' args ')'         { $$ = mk(N_CALL, &@1); $$->name = $1; $$->args = *$3; }
    ;

/* attn: Attention(x, n_head)   h: repeat(n_layer) Block(x) @pipeline */
inst
    : path ':' IDENT '(' args ')' annots
        { $$ = mk(N_INST, &@1); $$->label = $1; $$->name = $3; $$->args = *$5; $$->annots = *$7; }
    | path ':' KW_REPEAT '(' expr ')' IDENT '(' args ')' annots
        { $$ = mk(N_INST, &@1); $$->label = $1; $$->count = $5; $$->name = $7; $$->args = *$9;
          $$->annots = *$11; }
    ;

args
    : %empty                     { $$ = sx_alloc(sizeof(Vec)); }
    | arg_list                   { $$ = $1; }
    | arg_list ','               { $$ = $1; }
    ;

arg_list
    : arg                        { $$ = sx_alloc(sizeof(Vec)); vec_push($$, $1); }
    | arg_list ',' arg           { vec_push($1, $3); $$ = $1; }
    ;

arg
    : expr                       { $$ = $1; }
    | IDENT '=' expr             { $$ = mk(N_KWARG, &@1); $$->name = $1; $$->init = $3; }
    ;

%%

#include "lexer.h"

int ast_parse(Module *mod, const char *text, size_t len)
{
    struct lexstate ls;
    memset(&ls, 0, sizeof ls);
    ls.file = mod->path;
    ls.src = text;
    ls.len = len;
    ls.line = 1;
    ls.col = 1;
    yyscan_t scanner;
    if (sxp_lex_init_extra(&ls, &scanner) != 0) sx_ice("cannot start the lexer");
    int before = sx_error_count();
    int rc = sxp_parse(scanner, mod);
    sxp_lex_destroy(scanner);
    int errs = sx_error_count() - before;
    if (rc != 0 && errs == 0) {
        sx_loc l = {mod->path, ls.line, ls.col, ls.col};
        sx_error(&l, "cannot parse this file (parser gave up)");
        errs = 1;
    }
    return errs;
}
