# The web console's assets: web/*.{html,js,css} and the libraries it uses from npm
# (web/node_modules, installed by scripts/install-deps.sh with `npm ci`), embedded into a
# generated source (cmake/EmbedFiles.cmake) that is rebuilt when any of them changes.
find_package(SQLite3 REQUIRED)

set(web_dir ${PROJECT_SOURCE_DIR}/web)
if(NOT EXISTS ${web_dir}/node_modules/uplot/dist/uPlot.iife.min.js)
  # A checkout that has not run scripts/install-deps.sh since web/ appeared: install now.
  find_program(COHORT_NPM npm)
  if(NOT COHORT_NPM)
    message(FATAL_ERROR "web/node_modules is missing and npm is not installed: run scripts/install-deps.sh")
  endif()
  message(STATUS "Installing the web console's npm packages (npm ci in web/)")
  execute_process(COMMAND ${COHORT_NPM} ci --no-audit --no-fund WORKING_DIRECTORY ${web_dir}
                  RESULT_VARIABLE npm_result)
  if(NOT npm_result EQUAL 0)
    message(FATAL_ERROR "npm ci in web/ failed: run scripts/install-deps.sh")
  endif()
endif()

set(web_asset_names console.html console.js console.css jobs.html jobs.js compare.html compare.js
    simulate.html simulate.js uPlot.iife.min.js uPlot.min.css)
set(web_asset_files
  ${web_dir}/console.html ${web_dir}/console.js ${web_dir}/console.css ${web_dir}/jobs.html
  ${web_dir}/jobs.js ${web_dir}/compare.html ${web_dir}/compare.js ${web_dir}/simulate.html
  ${web_dir}/simulate.js
  ${web_dir}/node_modules/uplot/dist/uPlot.iife.min.js ${web_dir}/node_modules/uplot/dist/uPlot.min.css)
string(REPLACE ";" "|" names_arg "${web_asset_names}")
string(REPLACE ";" "|" files_arg "${web_asset_files}")
set(COHORT_WEB_ASSETS_CC ${CMAKE_BINARY_DIR}/generated/web_assets.cc)
add_custom_command(
  OUTPUT ${COHORT_WEB_ASSETS_CC}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/generated
  COMMAND ${CMAKE_COMMAND} -DOUTPUT=${COHORT_WEB_ASSETS_CC} "-DNAMES=${names_arg}"
          "-DFILES=${files_arg}" -P ${PROJECT_SOURCE_DIR}/cmake/EmbedFiles.cmake
  DEPENDS ${web_asset_files} ${PROJECT_SOURCE_DIR}/cmake/EmbedFiles.cmake
  COMMENT "Embedding the web console's assets" VERBATIM)
